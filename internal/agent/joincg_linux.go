package agent

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// joinCgroups is agentproto.JoinCgroupsArg: it joins the cgroups whose
// cgroup.procs files are descriptors 3 to 3+N-1, closes them, and
// executes the program that follows with the rest of its arguments.
func joinCgroups(args []string) {
	if len(args) < 2 {
		fail("usage: airlock-guest %s N PROGRAM [ARG...]", agentproto.JoinCgroupsArg)
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 0 || n > 16 {
		fail("bad cgroup count %q", args[0])
	}
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
	err = syscall.Exec(args[1], args[1:], os.Environ())
	fail("execute %s: %v", args[1], err)
}
