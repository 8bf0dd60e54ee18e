package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/api"
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
	if e := checkNetwork(p.Network); e != nil {
		return nil, e
	}
	if e := checkVFS(p.VFS); e != nil {
		return nil, e
	}
	if p.Image != "" && p.Image != "host" {
		return nil, rpcError(api.CodeUnsupported, "image %s is not available in this build: leave out image to use the host's /usr, /bin and /lib read-only, or give rootfs (a prepared root directory)", quote(p.Image))
	}
	cfg := airlock.Config{
		Image:          p.Image,
		RootFS:         p.RootFS,
		Isolation:      airlock.Isolation(p.Isolation),
		Resources:      airlock.Resources{CPUs: p.Resources.CPUs, MemoryMB: p.Resources.MemoryMB, TimeoutSeconds: p.Resources.TimeoutSeconds},
		Env:            maps.Clone(p.Env),
		PidsLimit:      p.PidsLimit,
		NofileLimit:    p.NofileLimit,
		DiskMB:         p.DiskMB,
		MaxFileSizeMB:  p.MaxFileSizeMB,
		MaxOutputBytes: p.MaxOutputBytes,
		Hostname:       p.Hostname,
		AllowPtrace:    p.AllowPtrace,
		Logger:         ss.log,
		OnEvent:        ss.events.publish,
	}
	if err := cfg.Validate(); err != nil {
		return nil, invalidParams("create params: %v", err)
	}
	j.releaseLine()
	start := time.Now()
	sb, err := ss.opts.Create(ctx, cfg)
	if err != nil {
		if ae := commonError(ctx, nil, err); ae != nil {
			return nil, ae
		}
		// The embed API's errors already say what to do; add advice only
		// where they do not.
		msg := err.Error()
		if !strings.Contains(msg, "airlock doctor") {
			msg += ": run `airlock doctor` to check this machine"
		}
		if errors.Is(err, airlock.ErrUnavailable) {
			return nil, rpcError(api.CodeUnsupported, "%s", msg)
		}
		return nil, rpcError(api.CodeStartFailed, "the sandbox could not be started: %s", msg)
	}
	e := &sandboxEntry{sb: sb, owned: true, created: start}
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
	ss.log.Info("sandbox created", "sandbox", sb.ID(), "ms", time.Since(start).Milliseconds())
	env := p.Env
	if env == nil {
		env = map[string]string{}
	}
	return api.CreateResult{SandboxID: sb.ID(), Isolation: string(sb.Config().Isolation), Env: env, Notes: sb.Notes()}, nil
}

// egressUnsupported says what this build offers instead of egress.
const egressUnsupported = "host-owned egress (allowed_hosts, secrets, policy_script) is not in this build yet: sandboxes have no network, which is the default; leave out network (or give it with no allowed_hosts, secrets or policy_script)"

// checkNetwork accepts the network configs that mean "no egress".
func checkNetwork(raw json.RawMessage) *api.Error {
	fields, ok := configObject(raw)
	if !ok {
		return rpcError(api.CodeUnsupported, "network must be an object: %s", egressUnsupported)
	}
	for k, v := range fields {
		switch k {
		case "block_private_ips":
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return invalidParams(`create params: "network.block_private_ips" must be true or false`)
			}
		case "allowed_hosts", "secrets", "policy_script":
			if !emptyJSON(v) {
				return rpcError(api.CodeUnsupported, "network.%s: %s", k, egressUnsupported)
			}
		default:
			return rpcError(api.CodeUnsupported, "network.%s is not known to this build: %s", quote(k), egressUnsupported)
		}
	}
	return nil
}

// checkVFS accepts an absent or empty vfs config.
func checkVFS(raw json.RawMessage) *api.Error {
	fields, ok := configObject(raw)
	if !ok {
		return rpcError(api.CodeUnsupported, "vfs must be an object, and programmable mounts are not in this build yet: leave out vfs, and copy files in with write_file")
	}
	for k, v := range fields {
		if !emptyJSON(v) {
			return rpcError(api.CodeUnsupported, "vfs.%s: programmable mounts are not in this build yet: leave out vfs, and copy files in with write_file", quote(k))
		}
	}
	return nil
}

// configObject decodes an optional object: nil for absent, null or
// empty; false when it is not an object.
func configObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if emptyJSON(raw) {
		return nil, true
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil, false
	}
	return fields, true
}

// emptyJSON reports whether v is absent, null, "", [] or {}.
func emptyJSON(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	switch string(v) {
	case "", "null", `""`, "[]", "{}":
		return true
	}
	if len(v) > 0 && (v[0] == '[' || v[0] == '{') {
		var a []json.RawMessage
		if json.Unmarshal(v, &a) == nil {
			return len(a) == 0
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) == nil {
			return len(m) == 0
		}
	}
	return false
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
	ss.mu.Unlock()
	if err := e.close(); err != nil {
		ss.log.Warn("close sandbox", "sandbox", e.sb.ID(), "err", err)
		return nil, internalError(fmt.Sprintf("close sandbox %s", e.sb.ID()), err)
	}
	ss.log.Info("sandbox closed", "sandbox", e.sb.ID())
	return struct{}{}, nil
}

// info describes the server and the session's sandboxes.
func (ss *session) info(ctx context.Context, j *job) (any, error) {
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
		if stopped(e.sb) {
			state = "stopped"
		}
		res.Sandboxes = append(res.Sandboxes, api.SandboxInfo{
			SandboxID: e.sb.ID(),
			Isolation: string(e.sb.Config().Isolation),
			CreatedAt: e.created,
			PID:       e.sb.PID(),
			Notes:     e.sb.Notes(),
			State:     state,
		})
	}
	return res, nil
}
