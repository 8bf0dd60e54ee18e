package agent

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// joinCgroups is agentproto.JoinCgroupsArg: it joins the cgroups whose
// cgroup.procs files are descriptors 3 to 3+N-1, closes them, enters a
// private mount namespace of its own if asked, and executes the program
// that follows with the rest of its arguments.
func joinCgroups(args []string) {
	if len(args) < 3 {
		fail("usage: airlock-guest %s N private|shared PROGRAM [ARG...]", agentproto.JoinCgroupsArg)
	}
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
	err = syscall.Exec(args[1], args[1:], os.Environ())
	fail("execute %s: %v", args[1], err)
}
