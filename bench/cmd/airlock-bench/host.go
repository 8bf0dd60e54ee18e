//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// hostInfo describes the machine and the code under test.
type hostInfo struct {
	Kernel    string `json:"kernel"`
	CPUModel  string `json:"cpu_model"`
	Cores     int    `json:"cores"`
	MemTotal  int64  `json:"mem_total_bytes"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	UID       int    `json:"uid"`
	// LoadStart and LoadEnd are /proc/loadavg when the run started and
	// ended: other work on the machine skews every number.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
	// Commit is `git rev-parse --short HEAD`; Describe adds tags and a
	// -dirty suffix for uncommitted changes.
	Commit   string `json:"airlock_commit,omitempty"`
	Describe string `json:"airlock_describe,omitempty"`
}

func gatherHost(ctx context.Context, moduleDir string) hostInfo {
	h := hostInfo{
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		UID:       os.Getuid(),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		h.CPUModel = string(fieldLine(b, "model name"))
		h.CPUModel = strings.TrimSpace(strings.TrimPrefix(h.CPUModel, ":"))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		h.MemTotal, _ = kbField(b, "MemTotal:")
	}
	h.LoadStart = loadAvg()
	h.Commit = gitOut(ctx, moduleDir, "rev-parse", "--short", "HEAD")
	h.Describe = gitOut(ctx, moduleDir, "describe", "--always", "--dirty", "--tags")
	return h
}

func gitOut(ctx context.Context, dir string, args ...string) string {
	if dir == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// moduleRoot returns the directory of the airlock module that the current
// directory is in, or "" when it is not in one.
func moduleRoot(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return ""
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return ""
	}
	b, err := os.ReadFile(gomod)
	if err != nil || !bytes.Contains(b, []byte("module github.com/airlock-sandbox/airlock\n")) {
		return ""
	}
	return filepath.Dir(gomod)
}

// buildAgent builds ./cmd/airlock-guest statically into dir.
func buildAgent(ctx context.Context, moduleDir, dir string) (string, time.Duration, error) {
	return buildBinary(ctx, moduleDir, dir, "./cmd/airlock-guest", "the agent", "-agent")
}

// buildCLI builds ./cmd/airlock, the command `airlock rpc` runs from,
// statically into dir.
func buildCLI(ctx context.Context, moduleDir, dir string) (string, time.Duration, error) {
	return buildBinary(ctx, moduleDir, dir, "./cmd/airlock", "the airlock command", "-airlock")
}

// buildHTTPClient builds ./bench/cmd/airlock-httpclient, the egress
// section's client, statically into dir: the sandbox runs it too.
func buildHTTPClient(ctx context.Context, moduleDir, dir string) (string, time.Duration, error) {
	return buildBinary(ctx, moduleDir, dir, "./bench/cmd/airlock-httpclient", "the HTTP client", "-httpclient")
}

// buildBinary builds the package pkg (./cmd/NAME) with CGO_ENABLED=0
// into dir/NAME. what and flag name the binary and the flag that skips
// the build in errors.
func buildBinary(ctx context.Context, moduleDir, dir, pkg, what, flag string) (string, time.Duration, error) {
	if moduleDir == "" {
		return "", 0, fmt.Errorf("cannot build %s: not inside the airlock module (run from the repository, or pass %s PATH)", what, flag)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("build %s: %v\n%s", what, err, b)
	}
	return out, time.Since(start), nil
}

// loadAvg returns the three load averages from /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
