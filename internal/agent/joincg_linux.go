package agent

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// joinCgroups is agentproto.JoinCgroupsArg: it joins the cgroups whose
// cgroup.procs files are descriptors 3 to 3+N-1, closes them, enters a
// private mount namespace of its own if asked, attaches there each
// detached mount named by an --attach FD:PATH (a descriptor of a mount
// made with fsmount or open_tree, and a directory), and executes the
// program that follows with the rest of its arguments.
func joinCgroups(args []string) {
	if len(args) < 3 {
		fail("usage: airlock-guest %s N private|shared [--attach FD:PATH]... PROGRAM [ARG...]", agentproto.JoinCgroupsArg)
	}
	// A mount namespace is a thread's: the one that enters it must be
	// the one that attaches the mounts and executes the program, or the
	// mounts land in the host's namespace and the program runs without
	// them.
	runtime.LockOSThread()
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 0 || n > 16 {
		fail("bad cgroup count %q", args[0])
	}
	private := args[1] == "private"
	args = args[1:]
	for i := range n {
		for {
			_, err := unix.Write(3+i, []byte("0"))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				fail("join the sandbox's cgroup: %v", err)
			}
			break
		}
		unix.Close(3 + i)
	}
	if private {
		// Mounts the program makes (runsc's) then die with it, even
		// when its supervisor is killed, and none reaches the host's.
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			fail("new mount namespace: %v", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fail("make mounts private: %v", err)
		}
	}
	for len(args) >= 3 && args[1] == "--attach" {
		fdStr, at, ok := strings.Cut(args[2], ":")
		fd, err := strconv.Atoi(fdStr)
		if !ok || err != nil || fd < 3 || !private {
			fail("bad --attach %q (FD:PATH, in a private mount namespace)", args[2])
		}
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			fail("attach a mount at %s: %v", at, err)
		}
		unix.Close(fd)
		args = append(args[:1], args[3:]...)
	}
	err = syscall.Exec(args[1], args[1:], os.Environ())
	fail("execute %s: %v", args[1], err)
}
