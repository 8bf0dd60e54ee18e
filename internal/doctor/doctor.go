// Package doctor implements the checks behind `airlock doctor`: for each
// isolation level (process, gvisor, vm) it inspects the host, explains what
// is missing and how to fix it, and — only when nothing essential is
// missing — starts a real sandbox through an injected Tryer. A level is
// never reported as working unless that real start succeeded.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"time"
)

// Status is the outcome of a single check.
type Status string

const (
	OK   Status = "ok"   // the feature is present and usable
	Warn Status = "warn" // usable, but degraded or a later feature is affected
	Fail Status = "fail" // a prerequisite of the level is missing
	Skip Status = "skip" // not checked or not applicable here
)

// Level names, in the order they are reported.
const (
	LevelProcess = "process"
	LevelGVisor  = "gvisor"
	LevelVM      = "vm"
)

// Check is one observation about the host.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`        // what was found
	Fix    string `json:"fix,omitempty"` // exact command or action when not ok
}

// Level is the verdict for one isolation level.
type Level struct {
	Name      string  `json:"name"`
	Works     bool    `json:"works"`
	Reason    string  `json:"reason,omitempty"` // why not, one sentence
	Fix       string  `json:"fix,omitempty"`
	Checks    []Check `json:"checks"`
	Tried     bool    `json:"tried"` // the Tryer was called, i.e. a real sandbox start was attempted
	TryMillis int64   `json:"try_ms,omitempty"`
}

// HostInfo describes the machine the report was made on.
type HostInfo struct {
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	Kernel string `json:"kernel"`
	Distro string `json:"distro,omitempty"` // PRETTY_NAME from /etc/os-release
	UID    int    `json:"uid"`
	CPUs   int    `json:"cpus"`
}

// Report is the full result of Run.
type Report struct {
	Host   HostInfo `json:"host"`
	Levels []Level  `json:"levels"`
}

// Tryer starts a real sandbox of the given level and runs `true` in it;
// nil means it worked. It must honour ctx's deadline.
type Tryer func(ctx context.Context, level string) error

// DefaultTryTimeout bounds a single Tryer call when Options.TryTimeout is 0.
const DefaultTryTimeout = 30 * time.Second

// Options configures Run. The zero value inspects the live host and reports
// every level as having no backend.
type Options struct {
	// Try maps a level name to its Tryer. A missing or nil entry means this
	// build has no backend for that level.
	Try map[string]Tryer
	// CgroupInfo reports the cgroup hierarchy airlock would use; nil skips
	// the cgroup check.
	CgroupInfo func() (version string, controllers []string, writable bool, reason string)
	// LookPath finds binaries; defaults to exec.LookPath.
	LookPath func(string) (string, error)
	// Root is the filesystem root for /proc, /sys, /dev and /etc reads;
	// defaults to "/". Probes that need system calls (user namespace
	// creation, Landlock, seccomp) always describe the live kernel.
	Root string
	// TryTimeout bounds each Tryer call; defaults to DefaultTryTimeout.
	TryTimeout time.Duration
	// KernelCacheDir is where guest kernels are cached (see package
	// vmkernel); empty skips the guest kernel check.
	KernelCacheDir string

	// host replaces the live system-call probes; tests set it.
	host *host
}

// host is everything Run learns from the running kernel and process rather
// than from files under Root.
type host struct {
	goos, goarch string
	uid          int
	exe          string                          // path of the airlock binary, for the AppArmor profile
	kernel       func() string                   // kernel release when Root has no osrelease
	userns       func(ctx context.Context) error // start /bin/true in a new user namespace
	landlock     func() (abi int, err error)     // Landlock ABI version
	seccomp      func() seccompProbe
}

// seccompProbe is what the kernel says about seccomp via system calls.
type seccompProbe struct {
	mode      int   // prctl(PR_GET_SECCOMP) for this process
	modeErr   error // EINVAL: kernel without CONFIG_SECCOMP
	filterErr error // nil when SECCOMP_SET_MODE_FILTER is supported
	notifyErr error // nil when SECCOMP_RET_USER_NOTIF is available
}

// Run inspects the host and tries each level. It never returns an error:
// every problem becomes a check or a level reason.
func Run(ctx context.Context, o Options) Report {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.TryTimeout <= 0 {
		o.TryTimeout = DefaultTryTimeout
	}
	h := o.host
	if h == nil {
		h = liveHost()
	}
	r := Report{Host: hostInfo(o.Root, h)}
	if h.goos != "linux" {
		r.Levels = unsupportedLevels(h.goos)
		return r
	}
	r.Levels = linuxLevels(ctx, o, h)
	return r
}

// linuxLevels gathers the environment checks once and judges each level.
func linuxLevels(ctx context.Context, o Options, h *host) []Level {
	userns := usernsChecks(ctx, o.Root, h)
	seccomp := seccompChecks(o.Root, h.seccomp())
	virt := ProbeVirt(o.Root, h.goarch)

	process := append([]Check{}, userns...)
	process = append(process, seccomp...)
	process = append(process,
		landlockCheck(o.Root, kernelRelease(o.Root, h), h.landlock),
		cgroupCheck(o.CgroupInfo),
		idsCheck(o.Root, h.uid, o.LookPath),
		fuseCheck(o.Root, kernelRelease(o.Root, h), h.uid),
		egressCheck(o.Root, h.uid),
		diskCheck(o.Root, h.uid, o.LookPath),
	)

	gvisor := []Check{runscCheck(o.LookPath)}
	gvisor = append(gvisor, userns...)
	gvisor = append(gvisor, seccomp[0]) // runsc's systrap platform needs seccomp filters

	vm := []Check{qemuCheck(o.LookPath, h.goarch)}
	vm = append(vm, virt.Checks()...)
	if o.KernelCacheDir != "" {
		vm = append(vm, guestKernelCheck(o.KernelCacheDir, h.goarch))
	}
	vm = append(vm, firecrackerCheck(o.LookPath, virt.KVMUsable()), tunCheck(o.Root, h.uid))

	return []Level{
		judge(ctx, o, LevelProcess, process),
		judge(ctx, o, LevelGVisor, gvisor),
		judge(ctx, o, LevelVM, vm),
	}
}

// judge decides whether a level works: it needs a backend, no failed
// prerequisite and a successful real start.
func judge(ctx context.Context, o Options, name string, checks []Check) Level {
	l := Level{Name: name, Checks: checks}
	try := o.Try[name]
	if try == nil {
		l.Reason = fmt.Sprintf("this version of airlock has no %s backend yet", name)
		return l
	}
	for _, c := range checks {
		if c.Status == Fail {
			l.Reason = fmt.Sprintf("check %q failed: %s", c.Name, c.Detail)
			l.Fix = c.Fix
			return l
		}
	}
	start := time.Now()
	err := tryOnce(ctx, try, name, o.TryTimeout)
	l.Tried = true
	l.TryMillis = time.Since(start).Milliseconds()
	if err != nil {
		l.Reason = fmt.Sprintf("starting a %s sandbox failed: %v", name, err)
		return l
	}
	l.Works = true
	return l
}

// tryOnce calls try with a deadline. A Tryer that ignores the deadline is
// abandoned once it passes, and a panicking Tryer counts as a failure, so
// a broken backend cannot hang or crash the doctor.
func tryOnce(ctx context.Context, try Tryer, level string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("backend panicked: %v", p)
			}
		}()
		done <- try(ctx, level)
	}()
	select {
	case err := <-done:
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no result within %s: %w", timeout, err)
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("no result within %s: %w", timeout, ctx.Err())
	}
}

// unsupportedLevels reports every level as unavailable on a non-Linux host.
func unsupportedLevels(goos string) []Level {
	platform := Check{
		Name:   "operating system",
		Status: Fail,
		Detail: goos + ": Linux namespaces, seccomp, Landlock and cgroups are unavailable",
		Fix:    "run airlock on Linux (for example inside a Linux VM)",
	}
	vmReason := "the vm level is not available on " + goos
	vmCheck := Check{Name: "operating system", Status: Fail, Detail: goos + " has no supported VM backend"}
	if goos == "darwin" {
		vmReason = "the vm level on macOS (Virtualization.framework) is not available in this version"
		vmCheck.Detail = "macOS: the vm level will use Virtualization.framework, not available in this version"
	}
	return []Level{
		{Name: LevelProcess, Reason: "the process level needs Linux kernel features; this host runs " + goos,
			Fix: platform.Fix, Checks: []Check{platform}},
		{Name: LevelGVisor, Reason: "gVisor runs only on Linux; this host runs " + goos,
			Fix: platform.Fix, Checks: []Check{platform}},
		{Name: LevelVM, Reason: vmReason, Checks: []Check{vmCheck}},
	}
}

// hostInfo fills HostInfo from Root and the live process.
func hostInfo(root string, h *host) HostInfo {
	return HostInfo{
		OS:     h.goos,
		Arch:   h.goarch,
		Kernel: kernelRelease(root, h),
		Distro: osRelease(root),
		UID:    h.uid,
		CPUs:   runtime.NumCPU(),
	}
}
