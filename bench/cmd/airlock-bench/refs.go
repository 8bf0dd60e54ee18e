//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/bench/internal/stats"
)

// refResult is one reference point or phase probe: a command run to
// completion again and again, timed from start to exit.
type refResult struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Skipped says why it was not measured (binary missing, it failed).
	Skipped string        `json:"skipped,omitempty"`
	Runs    int           `json:"runs,omitempty"`
	Wall    stats.Summary `json:"wall_ms"`
}

// cmdMaker builds a fresh, unstarted command for each run.
type cmdMaker func(ctx context.Context) *exec.Cmd

// timeCommand runs mk's command warmup times untimed, then runs times
// timed. A command that fails (or, with anyExit, fails to start) stops the
// probe and is reported as skipped.
func timeCommand(ctx context.Context, name, display string, runs, warmup int, anyExit bool, mk cmdMaker) refResult {
	r := refResult{Name: name, Command: display}
	var ds []time.Duration
	for i := -warmup; i < runs; i++ {
		if err := ctx.Err(); err != nil {
			r.Skipped = err.Error()
			return r
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := mk(cctx)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		cancel()
		if err != nil {
			var ee *exec.ExitError
			if !anyExit || !errors.As(err, &ee) {
				r.Skipped = fmt.Sprintf("failed: %v: %s", err, lastLine(stderr.String()))
				r.Wall = stats.Summary{}
				return r
			}
		}
		if i >= 0 {
			ds = append(ds, d)
		}
	}
	r.Runs = runs
	r.Wall = stats.Summarize(stats.Millis(ds))
	return r
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// references measures the other ways to start a process in isolation, in
// the same run so the numbers share the machine's state.
func references(ctx context.Context, runs, warmup int, stateDir string) []refResult {
	var out []refResult

	out = append(out, timeCommand(ctx, "fork+exec (os/exec)", `exec.Command("/usr/bin/true").Run()`, runs, warmup, false,
		func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, "/usr/bin/true") }))

	if p, err := exec.LookPath("unshare"); err == nil {
		args := []string{"-Urmpf", "--mount-proc", "/usr/bin/true"}
		out = append(out, timeCommand(ctx, "unshare (user+mount+pid ns)", "unshare "+strings.Join(args, " "), runs, warmup, false,
			func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, p, args...) }))
	} else {
		out = append(out, refResult{Name: "unshare (user+mount+pid ns)", Command: "unshare -Urmpf --mount-proc /usr/bin/true", Skipped: "unshare not on PATH (util-linux)"})
	}

	bwrapArgs := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "/usr/bin/true"}
	if p, err := exec.LookPath("bwrap"); err == nil {
		out = append(out, timeCommand(ctx, "bubblewrap", "bwrap "+strings.Join(bwrapArgs, " "), runs, warmup, false,
			func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, p, bwrapArgs...) }))
	} else {
		out = append(out, refResult{Name: "bubblewrap", Command: "bwrap " + strings.Join(bwrapArgs, " "), Skipped: "bwrap not on PATH (apt-get install -y bubblewrap)"})
	}

	// runsc keeps container state under --root; a private one leaves
	// nothing behind in /var/run.
	runscRoot := filepath.Join(stateDir, "runsc")
	runscArgs := []string{"--root", runscRoot, "--rootless", "--network=none", "do", "/bin/true"}
	runscShown := "runsc --root PRIVATE_DIR --rootless --network=none do /bin/true"
	if p, err := exec.LookPath("runsc"); err == nil {
		_ = os.MkdirAll(runscRoot, 0o700)
		out = append(out, timeCommand(ctx, "gVisor runsc do", runscShown, runs, warmup, false,
			func(ctx context.Context) *exec.Cmd {
				c := exec.CommandContext(ctx, p, runscArgs...)
				c.Dir = stateDir
				return c
			}))
	} else {
		out = append(out, refResult{Name: "gVisor runsc do", Command: runscShown, Skipped: "runsc not on PATH (apt-get install -y runsc)"})
	}
	return out
}

// agentNamespaces are the namespaces the process boundary starts its agent
// in (internal/boundary/process).
const agentNamespaces = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
	syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC

func nsAttr(flags uintptr) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// phaseProbes time the pieces that a sandbox start is built from, each on
// its own, to locate where Create's time goes.
func phaseProbes(ctx context.Context, runs, warmup int, agent string) []refResult {
	var out []refResult
	out = append(out, timeCommand(ctx, "clone into the agent's 6 namespaces + exec true",
		"user+mnt+pid+net+uts+ipc, uid/gid map, /usr/bin/true", runs, warmup, false,
		func(ctx context.Context) *exec.Cmd {
			c := exec.CommandContext(ctx, "/usr/bin/true")
			c.SysProcAttr = nsAttr(agentNamespaces)
			return c
		}))
	out = append(out, timeCommand(ctx, "same without a network namespace",
		"user+mnt+pid+uts+ipc, uid/gid map, /usr/bin/true", runs, warmup, false,
		func(ctx context.Context) *exec.Cmd {
			c := exec.CommandContext(ctx, "/usr/bin/true")
			c.SysProcAttr = nsAttr(agentNamespaces &^ syscall.CLONE_NEWNET)
			return c
		}))
	if agent != "" {
		// With /dev/null as its host channel the agent reads EOF for its
		// boot configuration and exits: Go runtime start + exit.
		out = append(out, timeCommand(ctx, "agent binary start+exit (no namespaces)",
			"airlock-guest with fd 3 = /dev/null", runs, warmup, true,
			func(ctx context.Context) *exec.Cmd {
				c := exec.CommandContext(ctx, agent)
				c.Args = []string{"airlock-guest"}
				c.Env = []string{}
				c.ExtraFiles = []*os.File{devNull()}
				return c
			}))
		out = append(out, timeCommand(ctx, "agent binary start+exit in the 6 namespaces",
			"airlock-guest with fd 3 = /dev/null, namespaces as above", runs, warmup, true,
			func(ctx context.Context) *exec.Cmd {
				c := exec.CommandContext(ctx, agent)
				c.Args = []string{"airlock-guest"}
				c.Env = []string{}
				c.ExtraFiles = []*os.File{devNull()}
				c.SysProcAttr = nsAttr(agentNamespaces)
				return c
			}))
	}
	return out
}

var devNullFile *os.File

func devNull() *os.File {
	if devNullFile == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			panic(err)
		}
		devNullFile = f
	}
	return devNullFile
}
