package agent

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// awaitMaps is the agent's first stage in a user namespace whose maps a
// helper writes from outside (see agentproto.AwaitMapsArg): it waits for
// the host's byte on the pipe syncFD, then executes the agent binary
// binFD again, with the same descriptors and environment, and with the
// arguments that follow the two descriptors, if any. Nothing else
// runs before: until the maps are written this process has no id in its
// namespace and no capability, and its execution afterwards, as root of
// the namespace, is what gives the agent its capabilities there. An end
// of file (the host's helper failed, or the host died) ends it.
func awaitMaps(args []string) {
	if len(args) < 2 {
		fail("usage: airlock-guest %s SYNC-FD BINARY-FD [ARG...]", agentproto.AwaitMapsArg)
	}
	syncFD, err1 := strconv.Atoi(args[0])
	binFD, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || syncFD < 3 || binFD < 3 {
		fail("bad descriptors %q", args[:2])
	}
	var b [1]byte
	for {
		n, err := unix.Read(syncFD, b[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 1 {
			// The host said nothing: it has given up on this start.
			os.Exit(1)
		}
		break
	}
	unix.Close(syncFD)
	argv, err := syscall.SlicePtrFromStrings(append([]string{"airlock-guest"}, args[2:]...)) // nil-terminated
	if err != nil {
		fail("%v", err)
	}
	envp, err := syscall.SlicePtrFromStrings(os.Environ()) // nil-terminated
	if err != nil {
		fail("%v", err)
	}
	empty, _ := unix.BytePtrFromString("")
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(binFD), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	fail("execute the agent again once the namespace's maps are written: %v", syscall.Errno(errno))
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "airlock agent: "+format+"\n", a...)
	os.Exit(1)
}
