package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/strictjson"
	"github.com/airlock-sandbox/airlock/policy"
)

// create starts a sandbox owned by the session.
func (ss *session) create(ctx context.Context, j *job) (any, error) {
	if !ss.opts.AllowCreate {
		return nil, rpcError(api.CodePermissionError, "create is not allowed here: this connection serves an existing sandbox; run `airlock rpc` to create sandboxes")
	}
	var p api.CreateParams
	if e := decodeParams(api.MethodCreate, j.req.params, &p); e != nil {
		return nil, e
	}
	var start func(context.Context) (*airlock.Sandbox, error)
	poolID := p.Pool
	if poolID != "" {
		pe, ae := ss.poolFor(p)
		if ae != nil {
			return nil, ae
		}
		p, start = pe.params, pe.pool.Get
	} else {
		cfg, ae := ss.sandboxConfig(p)
		if ae != nil {
			return nil, ae
		}
		start = func(ctx context.Context) (*airlock.Sandbox, error) { return ss.opts.Create(ctx, cfg) }
	}
	j.releaseLine()
	begin := time.Now()
	sb, err := start(ctx)
	if err != nil {
		if poolID != "" && ctx.Err() == nil && errors.Is(err, airlock.ErrClosed) {
			return nil, rpcError(api.CodeNotRunning, "pool %s was closed: start another with pool.create", quote(poolID))
		}
		return nil, startError(ctx, err)
	}
	e := &sandboxEntry{sb: sb, owned: true, created: begin}
	if ss.opts.OnCreate != nil {
		e.release = ss.opts.OnCreate(sb, p)
	}
	ss.mu.Lock()
	ending := ss.ending
	if !ending {
		ss.sbs.add(e)
	}
	ss.mu.Unlock()
	if ending {
		_ = e.close()
		return nil, commonError(ctx, nil, context.Canceled)
	}
	ss.log.Info("sandbox created", "sandbox", sb.ID(), "pool", poolID, "ms", time.Since(begin).Milliseconds())
	// The environment commands get: secrets as placeholders, never
	// their values.
	img := sb.Image()
	return api.CreateResult{SandboxID: sb.ID(), Isolation: string(sb.Config().Isolation), Env: sb.Env(), Notes: sb.Notes(), Ports: sb.Ports(),
		Image: api.Image{Name: img.Name, Key: img.Key, WorkingDir: img.WorkingDir, User: img.User, Entrypoint: img.Entrypoint, Cmd: img.Cmd}}, nil
}

// sandboxConfig is the sandbox configuration create's params describe,
// validated.
func (ss *session) sandboxConfig(p api.CreateParams) (airlock.Config, *api.Error) {
	network, ae := decodeNetwork(p.Network)
	if ae != nil {
		return airlock.Config{}, ae
	}
	env := maps.Clone(p.Env)
	if ae := secretsInEnv(network, env); ae != nil {
		return airlock.Config{}, ae
	}
	vfsCfg, ae := decodeVFS(p.VFS)
	if ae != nil {
		return airlock.Config{}, ae
	}
	cfg := airlock.Config{
		Image:          p.Image,
		RootFS:         p.RootFS,
		Isolation:      airlock.Isolation(p.Isolation),
		Resources:      airlock.Resources{CPUs: p.Resources.CPUs, MemoryMB: p.Resources.MemoryMB, TimeoutSeconds: p.Resources.TimeoutSeconds},
		Env:            env,
		PidsLimit:      p.PidsLimit,
		NofileLimit:    p.NofileLimit,
		DiskMB:         p.DiskMB,
		MaxFileSizeMB:  p.MaxFileSizeMB,
		MaxOutputBytes: p.MaxOutputBytes,
		Hostname:       p.Hostname,
		AllowPtrace:    p.AllowPtrace,
		Network:        network,
		Ports:          p.Ports,
		VFS:            vfsCfg,
		Logger:         ss.log,
		OnEvent:        ss.events.publish,
		OnImageProgress: func(ip airlock.ImageProgress) {
			_ = ss.out.notify(api.NotifyImageProgress, api.ImageProgress(ip))
		},
	}
	if ss.opts.Configure != nil {
		var err error
		if cfg, err = ss.opts.Configure(cfg); err != nil {
			return airlock.Config{}, invalidParams("create params: %v", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return airlock.Config{}, invalidParams("create params: %v", err)
	}
	return cfg, nil
}

// startError is the answer to a create, or a pool.create, whose start
// failed with err.
func startError(ctx context.Context, err error) *api.Error {
	if ae := commonError(ctx, nil, err); ae != nil {
		return ae
	}
	if errors.Is(err, airlock.ErrHostPortUnavailable) {
		return invalidParams("create params: ports: %v", err)
	}
	var ce *policy.ConfigError
	if errors.As(err, &ce) {
		// Found only once the policy is built: an extra root CA
		// that cannot be read, a policy script that fails. The
		// problems alone: the embed API names the policy too.
		return invalidParams("create params: %v", ce)
	}
	// The embed API's errors already say what to do; add advice only
	// where they do not.
	msg := err.Error()
	if !strings.Contains(msg, "airlock doctor") {
		msg += ": run `airlock doctor` to check this machine"
	}
	if errors.Is(err, airlock.ErrUnavailable) {
		return rpcError(api.CodeUnsupported, "%s", msg)
	}
	return rpcError(api.CodeStartFailed, "the sandbox could not be started: %s", msg)
}

// article puts "a" or "an" before a JSON kind ("number", "object").
func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// networkFields lists what the network object takes, for error messages.
const networkFields = "allowed_hosts, denied_hosts, block_private_ips, allowed_cidrs, egress, secrets, scrub_responses, policy_script, dns_servers, extra_root_cas, response_header_timeout_seconds"

// decodeNetwork decodes the network policy of create strictly: nil for
// absent or null (no network at all). No message quotes a secret's
// value.
func decodeNetwork(raw json.RawMessage) (*policy.Config, *api.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, invalidParams(`create params: "network" must be an object (the network policy: %s; {} allows nothing) or null for no network`, networkFields)
	}
	cfg, err := policy.DecodeConfig(raw)
	if err != nil {
		var te *json.UnmarshalTypeError
		var ce *policy.ConfigError
		switch {
		case errors.As(err, &te) && te.Field != "":
			// Only the kind of te.Value: for a number it holds the
			// number, which may be a secret's value.
			kind, _, _ := strings.Cut(te.Value, " ")
			return nil, invalidParams("create params: %q has %s where %s is wanted", "network."+te.Field, article(kind), jsonKind(te.Type))
		case errors.As(err, &ce):
			return nil, invalidParams("create params: %v", err)
		case strings.Contains(err.Error(), "unknown field"):
			// Named by its path in create's params.
			if ue := strictjson.Find(raw, reflect.TypeFor[policy.Config]()); ue != nil {
				return nil, invalidParams("create params: %v", ue.In("network"))
			}
			return nil, invalidParams("create params: %v: the network object takes %s", err, networkFields)
		}
		return nil, invalidParams("create params: %v", err)
	}
	return &cfg, nil
}

// secretsInEnv checks env against the secrets of cfg: a secret's variable
// holds its placeholder, so env may not set it, except to "${NAME}" (a
// reference to the secret, as the protocol's examples write it), which
// is dropped from env for the placeholder to take its place.
func secretsInEnv(cfg *policy.Config, env map[string]string) *api.Error {
	if cfg == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Secrets)) {
		v, ok := env[name]
		switch {
		case !ok:
		case v == "${"+name+"}":
			delete(env, name)
		default:
			return invalidParams("create params: env.%s: %s is also a secret (network.secrets.%s): commands get the secret's placeholder in that variable; leave it out of env, or set it to \"${%s}\"", name, name, name, name)
		}
	}
	return nil
}

// vfsFields names what the vfs object takes, for errors.
const vfsFields = `mounts ({"/workspace": {"type": "memory"}}), direct_mounts ({"/data": {"host_path": "/srv/data", "readonly": true}}) and blocked_paths (["/workspace/.env"])`

// decodeVFS decodes create's vfs strictly: an unknown field, anywhere
// in it, is refused with its path.
func decodeVFS(raw json.RawMessage) (airlock.VFSConfig, *api.Error) {
	var v airlock.VFSConfig
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return v, nil
	}
	if raw[0] != '{' {
		return v, invalidParams(`create params: "vfs" must be an object: it takes %s`, vfsFields)
	}
	if err := strictjson.Decode(raw, &v); err != nil {
		var te *json.UnmarshalTypeError
		var ue *strictjson.UnknownFieldError
		switch {
		case errors.As(err, &ue):
			return v, invalidParams("create params: %v", ue.In("vfs"))
		case errors.As(err, &te) && te.Field != "":
			kind, _, _ := strings.Cut(te.Value, " ")
			return v, invalidParams("create params: %q has %s where %s is wanted", "vfs."+te.Field, article(kind), jsonKind(te.Type))
		}
		return v, invalidParams("create params: vfs: %v: it takes %s", err, vfsFields)
	}
	return v, nil
}

// closeSandbox stops a sandbox: one of the session's, or a shared one.
func (ss *session) closeSandbox(ctx context.Context, j *job) (any, error) {
	var p api.SandboxParams
	if e := decodeParams(api.MethodClose, j.req.params, &p); e != nil {
		return nil, e
	}
	e, err := ss.resolve(p.SandboxID)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	ss.sbs.forget(e)
	last := e.owned && ss.opts.EndWithLastSandbox && !ss.ownsAny()
	ss.mu.Unlock()
	if last {
		// Once this answer is out (see handle).
		ss.lastClosed.Store(true)
	}
	if err := e.close(); err != nil {
		ss.log.Warn("close sandbox", "sandbox", e.sb.ID(), "err", err)
		return nil, internalError(fmt.Sprintf("close sandbox %s", e.sb.ID()), err)
	}
	ss.log.Info("sandbox closed", "sandbox", e.sb.ID())
	return struct{}{}, nil
}

// ownsAny reports whether the session still has a sandbox it created;
// ss.mu is held.
func (ss *session) ownsAny() bool {
	for _, e := range ss.sbs.list() {
		if e.owned {
			return true
		}
	}
	return false
}

// info describes the server and the session's sandboxes.
func (ss *session) info(ctx context.Context, j *job) (any, error) {
	if e := decodeParams(api.MethodInfo, j.req.params, &struct{}{}); e != nil {
		return nil, e
	}
	ss.mu.Lock()
	entries := ss.sbs.list()
	ss.mu.Unlock()
	res := api.InfoResult{
		Version:         ss.opts.Version,
		Protocol:        api.Version,
		MaxMessageBytes: ss.opts.MaxMessage,
		Sandboxes:       []api.SandboxInfo{},
		EventsDropped:   ss.events.dropped.Load(),
	}
	for _, e := range entries {
		state := "running"
		switch {
		case stopped(e.sb):
			state = "stopped"
		case e.sb.Paused():
			state = "paused"
		}
		res.Sandboxes = append(res.Sandboxes, api.SandboxInfo{
			SandboxID: e.sb.ID(),
			Isolation: string(e.sb.Config().Isolation),
			CreatedAt: e.created,
			PID:       e.sb.PID(),
			Notes:     e.sb.Notes(),
			State:     state,
			Ports:     e.sb.Ports(),
		})
	}
	return res, nil
}
