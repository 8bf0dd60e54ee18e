package cli

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/lifecycle"
	"github.com/airlock-sandbox/airlock/internal/rpc"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// recordSandboxes makes the sandboxes an `airlock rpc` session creates
// visible to the other commands: each is recorded in the state directory,
// supervised by this process, and gets a control socket, so that airlock
// list, exec, cp and kill reach it.
func (a *app) recordSandboxes(opts *rpc.Options) {
	store, err := openStore()
	if err != nil {
		opts.Logger.Warn("sandboxes of this session will not appear in airlock list", "err", err)
		return
	}
	control := rpc.NewServer(rpc.Options{Version: a.version, Logger: opts.Logger})
	var mu sync.Mutex
	hubs := map[string]*rpc.Hub{}
	opts.Create = func(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
		// Events go to the creating session and, through a hub, to
		// sessions on the control socket.
		id, hub := airlock.NewID(), &rpc.Hub{}
		session := cfg.OnEvent
		cfg.OnEvent = func(e airlock.Event) {
			if session != nil {
				session(e)
			}
			hub.Publish(e)
		}
		mu.Lock()
		hubs[id] = hub
		mu.Unlock()
		sb, err := airlock.CreateWithID(ctx, id, cfg)
		if err != nil {
			mu.Lock()
			delete(hubs, id)
			mu.Unlock()
		}
		return sb, err
	}
	// A pool's sandboxes are started before anything asks for them:
	// each one's hub is made by its first event, and dropped by its
	// last (once it stops), whether or not a create took it.
	pooled := map[string]*rpc.Hub{}
	opts.NewPool = func(ctx context.Context, cfg airlock.Config, size int) (*airlock.Pool, error) {
		session := cfg.OnEvent
		cfg.OnEvent = func(e airlock.Event) {
			if session != nil {
				session(e)
			}
			mu.Lock()
			hub := pooled[e.SandboxID]
			if hub == nil {
				hub = &rpc.Hub{}
				pooled[e.SandboxID] = hub
			}
			if e.Type == airlock.EventLifecycle && e.Lifecycle != nil && e.Lifecycle.State != "started" {
				delete(pooled, e.SandboxID)
			}
			mu.Unlock()
			hub.Publish(e)
		}
		return airlock.NewPool(ctx, cfg, size)
	}
	opts.OnCreate = func(sb *airlock.Sandbox, params api.CreateParams) func() {
		mu.Lock()
		hub := hubs[sb.ID()]
		delete(hubs, sb.ID())
		if hub == nil {
			hub = pooled[sb.ID()]
		}
		if hub == nil {
			// Taken from a pool, and stopped already: no more events.
			hub = &rpc.Hub{}
		}
		mu.Unlock()
		cfg, _ := json.Marshal(params)
		sup, err := lifecycle.Begin(context.Background(), sb, lifecycle.Options{
			Store: store, Kind: state.KindRPC, Config: cfg, Server: control, Events: hub, Logger: opts.Logger,
		})
		if err != nil {
			opts.Logger.Warn("sandbox will not appear in airlock list", "sandbox", sb.ID(), "err", err)
			return nil
		}
		// A sandbox may also stop by itself (its lifetime, a crash) or
		// through its control socket.
		go func() {
			<-sb.Done()
			sup.EndFor(sb.Err(), "closed")
		}()
		return func() { sup.EndFor(sb.Err(), "closed") }
	}
}
