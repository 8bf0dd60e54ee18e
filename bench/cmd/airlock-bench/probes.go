//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// These probes drive pieces of the product below the public API (the
// cgroup package, the spawner's start-up protocol) to time them alone.
// They are diagnostics: when one fails it is reported as skipped.

// cgroupProbe times creating, reading the statistics of, and deleting a
// sandbox's cgroups with the limits a default sandbox gets.
func cgroupProbe(ctx context.Context, runs, warmup int) []refResult {
	lim := cgroup.Limits{Pids: airlock.DefaultPidsLimit}
	var create, add, st, del []time.Duration
	skip := func(err error) []refResult {
		return []refResult{{Name: "cgroup create", Command: "internal/cgroup", Skipped: err.Error()}}
	}
	for i := -warmup; i < runs; i++ {
		if err := ctx.Err(); err != nil {
			return skip(err)
		}
		id := "bench-" + airlock.NewID()[3:]
		t0 := time.Now()
		g, err := cgroup.New(ctx, id, lim)
		t1 := time.Now()
		if err != nil {
			return skip(fmt.Errorf("cgroups unavailable: %w", err))
		}
		d, err := cgroupAddOnce(ctx, g)
		if err != nil {
			g.Delete()
			return skip(fmt.Errorf("move a process into the agent group: %w", err))
		}
		t2 := time.Now()
		_, serr := g.Stats()
		t3 := time.Now()
		derr := g.Delete()
		t4 := time.Now()
		if serr != nil || derr != nil {
			return skip(fmt.Errorf("stats: %v, delete: %v", serr, derr))
		}
		if i >= 0 {
			create = append(create, t1.Sub(t0))
			add = append(add, d)
			st = append(st, t3.Sub(t2))
			del = append(del, t4.Sub(t3))
		}
	}
	v := cgroup.Detect().Version.String()
	return []refResult{
		{Name: "cgroup create (" + v + ")", Command: "parent, agent and user groups, pids limit", Runs: runs, Wall: stats.Summarize(stats.Millis(create))},
		{Name: "cgroup: move the agent in", Command: "Group.AddAgent of a running process", Runs: runs, Wall: stats.Summarize(stats.Millis(add))},
		{Name: "cgroup statistics read", Command: "Group.Stats: what Run reads to attribute limit hits", Runs: runs, Wall: stats.Summarize(stats.Millis(st))},
		{Name: "cgroup delete", Command: "groups emptied by the process's exit", Runs: runs, Wall: stats.Summarize(stats.Millis(del))},
	}
}

// cgroupAddOnce starts a process that waits on its stdin, times moving it
// into g's agent group, and ends it.
func cgroupAddOnce(ctx context.Context, g *cgroup.Group) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "sleep", "30")
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	t0 := time.Now()
	err := g.AddAgent(cmd.Process.Pid)
	d := time.Since(t0)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return d, err
}

// spawnerProbe times the spawner (the agent binary in "zygote" mode) from
// process start to its "ready" message: Go runtime start, /proc mount,
// rlimits, and the confinement every user command inherits. It runs in new
// user, mount and PID namespaces (the product clones only mount and PID
// ones, from inside the agent's user namespace), without cgroup fds.
func spawnerProbe(ctx context.Context, runs, warmup int, agentPath, name, what string, cfg agent.ZygoteConfig) refResult {
	r := refResult{Name: name, Command: what}
	b, err := cbor.Marshal(cfg)
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	arg := base64.StdEncoding.EncodeToString(b)
	var ds []time.Duration
	for i := -warmup; i < runs; i++ {
		d, err := spawnerOnce(ctx, agentPath, arg)
		if err != nil {
			r.Skipped = err.Error()
			return r
		}
		if i >= 0 {
			ds = append(ds, d)
		}
	}
	r.Runs = runs
	r.Wall = stats.Summarize(stats.Millis(ds))
	return r
}

func spawnerOnce(ctx context.Context, agentPath, arg string) (time.Duration, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	ours := os.NewFile(uintptr(fds[0]), "spawner")
	theirs := os.NewFile(uintptr(fds[1]), "spawner")
	defer ours.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentPath)
	cmd.Args = []string{"airlock-guest", "zygote", arg}
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{theirs}
	var stderr tail
	cmd.Stderr = &stderr
	cmd.SysProcAttr = nsAttr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		theirs.Close()
		return 0, err
	}
	theirs.Close()
	// The read blocks until the spawner reports or exits (closing its
	// end); the context kills it if it does neither.
	buf := make([]byte, 4096)
	n, rerr := ours.Read(buf)
	d := time.Since(t0)
	ours.Close() // the spawner exits when its socket closes
	werr := cmd.Wait()
	if rerr != nil || n == 0 {
		return 0, fmt.Errorf("spawner sent nothing (%v, %v): %s", rerr, werr, lastLine(stderr.String()))
	}
	var m struct {
		Op  string `cbor:"op"`
		Err string `cbor:"err"`
	}
	if err := cbor.Unmarshal(buf[:n], &m); err != nil || m.Op != "ready" {
		return 0, fmt.Errorf("spawner sent an unexpected message (%v)", err)
	}
	if m.Err != "" {
		return 0, fmt.Errorf("spawner setup failed: %s", m.Err)
	}
	return d, nil
}

// tail keeps the last 4 KiB written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

// internalProbes are the probes above, with the spawner configured as a
// default sandbox configures it and with landlock and seccomp left out.
func internalProbes(ctx context.Context, runs, warmup int, agentPath string) []refResult {
	out := cgroupProbe(ctx, runs, warmup)
	if agentPath == "" {
		return out
	}
	full := agent.ZygoteConfig{NoFile: airlock.DefaultNofileLimit, Seccomp: true, Landlock: true, MountProc: true}
	out = append(out, spawnerProbe(ctx, runs, warmup, agentPath,
		"spawner start → ready, fully confined", "agent binary as spawner: /proc, rlimits, landlock, no_new_privs, capabilities dropped, seccomp", full))
	bare := full
	bare.Seccomp, bare.Landlock = false, false
	out = append(out, spawnerProbe(ctx, runs, warmup, agentPath,
		"spawner start → ready, no landlock or seccomp", "as above without landlock and seccomp (capabilities are always dropped)", bare))
	return out
}
