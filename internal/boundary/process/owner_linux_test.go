package process

import (
	"fmt"
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
	want := threadIDs(t)
	var wantLine string
	for _, l := range want {
		wantLine = l
		break
	}

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

// TestStartOwnedRefused gives a mapping the owner may not write (two
// ids): Start fails, and every thread has root's ids again.
func TestStartOwnedRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root makes namespaces owned by another uid")
	}
	uid := SandboxUIDBase + SandboxUIDRange - 2000
	cmd := &exec.Cmd{
		Path: "/bin/true",
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 2}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		},
	}
	want := threadIDs(t)
	var wantLine string
	for _, l := range want {
		wantLine = l
		break
	}
	if err := startOwned(cmd, uid, uid); err == nil {
		cmd.Wait()
		t.Fatal("a mapping of two ids written by their owner was accepted")
	}
	for task, ids := range threadIDs(t) {
		if ids != wantLine {
			t.Errorf("after the refused start, thread %s has %q, want %q", task, ids, wantLine)
		}
	}
}
