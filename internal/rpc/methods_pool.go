package rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
)

// poolEntry is a pool of a session.
type poolEntry struct {
	id      string
	pool    *airlock.Pool
	params  api.CreateParams
	created time.Time
}

// newPoolID returns a fresh pool id.
func newPoolID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pool-" + hex.EncodeToString(b[:])
}

// poolCreate starts a pool of sandboxes, owned by the session.
func (ss *session) poolCreate(ctx context.Context, j *job) (any, error) {
	if !ss.opts.AllowCreate {
		return nil, rpcError(api.CodePermissionError, "pool.create is not allowed here: this connection serves an existing sandbox; run `airlock rpc` to create sandboxes")
	}
	var p api.PoolCreateParams
	if e := decodeParams(api.MethodPoolCreate, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.Pool != "" {
		return nil, invalidParams(`pool.create params: "pool" names a pool to take a sandbox from, in create; a pool cannot take its sandboxes from another`)
	}
	if p.Size < 1 || p.Size > airlock.MaxPoolSize {
		return nil, invalidParams(`pool.create params: "size" must be the number of sandboxes to keep ready, 1 to %d, not %d`, airlock.MaxPoolSize, p.Size)
	}
	cfg, ae := ss.sandboxConfig(p.CreateParams)
	if ae != nil {
		return nil, ae
	}
	j.releaseLine()
	pool, err := ss.opts.NewPool(ctx, cfg, p.Size)
	if err != nil {
		return nil, startError(ctx, err)
	}
	pe := &poolEntry{id: newPoolID(), pool: pool, params: p.CreateParams, created: time.Now()}
	ss.mu.Lock()
	ending := ss.ending
	if !ending {
		ss.pools[pe.id] = pe
	}
	ss.mu.Unlock()
	if ending {
		ss.closePools(map[string]*poolEntry{pe.id: pe})
		return nil, commonError(ctx, nil, context.Canceled)
	}
	ss.log.Info("pool created", "pool", pe.id, "size", p.Size)
	return api.PoolCreateResult{PoolID: pe.id}, nil
}

// poolFor finds the pool a create names; p must name nothing else.
func (ss *session) poolFor(p api.CreateParams) (*poolEntry, *api.Error) {
	rest := p
	rest.Pool = ""
	if !reflect.ValueOf(rest).IsZero() {
		return nil, invalidParams(`create params: a sandbox taken from a pool has the configuration given to pool.create: give "pool" alone`)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.lookupPool(p.Pool)
}

// lookupPool finds a pool of the session by id; ss.mu is held.
func (ss *session) lookupPool(id string) (*poolEntry, *api.Error) {
	if pe, ok := ss.pools[id]; ok {
		return pe, nil
	}
	if ss.closedPools[id] {
		return nil, rpcError(api.CodeNotRunning, "pool %s was closed: start another with pool.create", quote(id))
	}
	return nil, rpcError(api.CodeNotFound, "no pool %s in this session: use a pool_id returned by pool.create (pool.list lists them)", quote(id))
}

// poolClose closes a pool: the sandboxes waiting in it are closed; those
// taken from it keep running.
func (ss *session) poolClose(ctx context.Context, j *job) (any, error) {
	var p api.PoolParams
	if e := decodeParams(api.MethodPoolClose, j.req.params, &p); e != nil {
		return nil, e
	}
	if p.PoolID == "" {
		return nil, invalidParams(`pool.close params: "pool_id" is required: give a pool_id returned by pool.create`)
	}
	ss.mu.Lock()
	pe, ae := ss.lookupPool(p.PoolID)
	if ae == nil {
		delete(ss.pools, pe.id)
		if len(ss.closedPools) < maxForgotten {
			ss.closedPools[pe.id] = true
		}
	}
	ss.mu.Unlock()
	if ae != nil {
		return nil, ae
	}
	if err := pe.pool.Close(); err != nil {
		ss.log.Warn("close pool", "pool", pe.id, "err", err)
		return nil, internalError(fmt.Sprintf("close pool %s", pe.id), err)
	}
	ss.log.Info("pool closed", "pool", pe.id)
	return struct{}{}, nil
}

// poolList lists the session's pools, oldest first.
func (ss *session) poolList(ctx context.Context, j *job) (any, error) {
	if e := decodeParams(api.MethodPoolList, j.req.params, &struct{}{}); e != nil {
		return nil, e
	}
	ss.mu.Lock()
	pools := make([]*poolEntry, 0, len(ss.pools))
	for _, pe := range ss.pools {
		pools = append(pools, pe)
	}
	ss.mu.Unlock()
	sort.Slice(pools, func(i, k int) bool {
		if !pools[i].created.Equal(pools[k].created) {
			return pools[i].created.Before(pools[k].created)
		}
		return pools[i].id < pools[k].id
	})
	res := api.PoolListResult{Pools: []api.PoolInfo{}}
	for _, pe := range pools {
		st := pe.pool.Stats()
		res.Pools = append(res.Pools, api.PoolInfo{
			PoolID: pe.id, Isolation: string(pe.pool.Config().Isolation),
			Size: st.Size, Ready: st.Ready, Started: st.Started, Failed: st.Failed, Discarded: st.Discarded,
		})
	}
	return res, nil
}

// closePools closes pools in parallel, waiting at most closeTimeout.
func (ss *session) closePools(pools map[string]*poolEntry) {
	var wg sync.WaitGroup
	for _, pe := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pe.pool.Close(); err != nil {
				ss.log.Warn("close pool", "pool", pe.id, "err", err)
			}
		}()
	}
	if !waitTimeout(&wg, closeTimeout) {
		ss.log.Error("pools did not close in time", "timeout", closeTimeout)
	}
}
