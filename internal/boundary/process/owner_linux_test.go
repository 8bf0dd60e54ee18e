package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// threadIDs lists, for every thread of this process, the Uid, Gid and
// CapEff lines of its status.
func threadIDs(t *testing.T) map[string]string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		var keep []string
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "Gid:") || strings.HasPrefix(l, "CapEff:") {
				keep = append(keep, strings.Join(strings.Fields(l), " "))
			}
		}
		out[p] = strings.Join(keep, "; ")
	}
	return out
}

// TestStartOwned starts processes in new user namespaces, many at once,
// each owned by a uid of its own, and checks that each namespace belongs
// to its uid and that afterwards every thread of this process has root's
// ids and capabilities again, and the process its dumpable attribute.
func TestStartOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root makes namespaces owned by another uid")
	}
	before, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantLine := oneThread(t)

	const n = 16
	base := SandboxUIDBase + SandboxUIDRange - 1000 // out of the way of running sandboxes
	cmds := make([]*exec.Cmd, n)
	var wg sync.WaitGroup
	for i := range n {
		uid := base + i
		cmds[i] = &exec.Cmd{
			Path: "/bin/sleep",
			Args: []string{"sleep", "60"},
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
				UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
				GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
				GidMappingsEnableSetgroups: false,
				Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
				Pdeathsig:                  syscall.SIGKILL,
			},
		}
		wg.Go(func() {
			if err := startOwned(cmds[i], uid, uid); err != nil {
				t.Errorf("start as uid %d: %v", uid, err)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range cmds {
			if c.Process != nil {
				c.Process.Kill()
				c.Wait()
			}
		}
	})
	if t.Failed() {
		return
	}
	for i, c := range cmds {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", c.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		owner, err := unix.IoctlGetUint32(int(f.Fd()), unix.NS_GET_OWNER_UID)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int(owner) != base+i {
			t.Errorf("the namespace of the process started as uid %d belongs to uid %d", base+i, owner)
		}
	}
	for task, ids := range threadIDs(t) {
		if ids != wantLine {
			t.Errorf("after the starts, thread %s has %q, want %q as before", task, ids, wantLine)
		}
	}
	if after, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || after != before {
		t.Errorf("the process's dumpable attribute is %d (%v) after the starts, want %d as before", after, err, before)
	}
}

// TestStartOwnedFails starts a program that is not there: Start fails
// after the clone, and every thread has root's ids again.
func TestStartOwnedFails(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root makes namespaces owned by another uid")
	}
	uid := SandboxUIDBase + SandboxUIDRange - 2000
	cmd := &exec.Cmd{
		Path: "/nonexistent/airlock-guest",
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		},
	}
	wantLine := oneThread(t)
	if err := startOwned(cmd, uid, uid); !errors.Is(err, fs.ErrNotExist) {
		if err == nil {
			cmd.Wait()
		}
		t.Fatalf("start of a missing program: %v, want ENOENT", err)
	}
	for task, ids := range threadIDs(t) {
		if ids != wantLine {
			t.Errorf("after the failed start, thread %s has %q, want %q", task, ids, wantLine)
		}
	}
}

// oneThread returns what threadIDs says of every thread, which must be
// the same for all of them.
func oneThread(t *testing.T) string {
	t.Helper()
	var line string
	for task, ids := range threadIDs(t) {
		if line != "" && ids != line {
			t.Fatalf("threads differ before the test: %s has %q, another %q", task, ids, line)
		}
		line = ids
	}
	return line
}
