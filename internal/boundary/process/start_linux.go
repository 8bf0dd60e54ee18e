package process

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// agentStart is how the agent is started in its namespaces: the
// descriptor of the child that holds the agent's binary, and what the
// child gets.
type agentStart struct {
	binFD  int
	extra  []*os.File // the child's descriptors from 3 up, binFD among them
	env    []string
	stderr io.Writer
}

// namespaces are those the agent starts in.
const namespaces = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
	syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC

// start starts the agent in new namespaces with mapping m and returns it
// running.
//
// When this process may write the maps itself (root, or a caller that
// maps its own ids alone), the clone writes them before the agent is
// executed, and the agent starts as root of the namespace. A caller's
// subordinate ids can only be mapped by newuidmap and newgidmap, once
// the namespace exists: the agent is then started in its first stage
// (agentproto.AwaitMapsArg), which waits until the helpers have written
// the maps and executes the agent again, as root of the namespace, so
// that it never runs with a namespace half set up.
func (a agentStart) start(ctx context.Context, m idMapping) (*exec.Cmd, error) {
	uid, gid := m.root()
	attr := &syscall.SysProcAttr{
		Cloneflags: namespaces,
		Pdeathsig:  syscall.SIGKILL,
	}
	cmd := &exec.Cmd{
		Path:        fmt.Sprintf("/proc/self/fd/%d", a.binFD),
		Args:        []string{"airlock-guest"},
		Env:         append([]string{}, a.env...),
		Dir:         "/",
		Stderr:      a.stderr,
		ExtraFiles:  a.extra,
		SysProcAttr: attr,
	}
	if m.helpers == nil {
		attr.UidMappings = m.uids
		attr.GidMappings = m.gids
		// Become root of the new namespace before exec, so that the
		// agent starts with the namespace's capabilities: when the
		// caller is root, its own uid is not mapped there. The
		// supplementary groups this process has are dropped where the
		// namespace allows setgroups, which it does when its maps hold
		// more than the caller's own ids (written by root).
		attr.GidMappingsEnableSetgroups = m.size() > 1
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: m.size() == 1}
		// The namespaces belong to the sandbox's root, so that what
		// the kernel charges to their owner is the sandbox's own (see
		// startOwned).
		if err := startOwned(cmd, uid, gid); err != nil {
			return nil, err
		}
		return cmd, nil
	}

	sync, release, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer release.Close()
	syncFD := 3 + len(a.extra)
	cmd.ExtraFiles = append(append([]*os.File{}, a.extra...), sync)
	cmd.Args = []string{"airlock-guest", agentproto.AwaitMapsArg, strconv.Itoa(syncFD), strconv.Itoa(a.binFD)}
	err = cmd.Start()
	sync.Close()
	if err != nil {
		return nil, err
	}
	// The helpers are given the child's pid, which cannot name another
	// process meanwhile: the child is not waited for until it has
	// failed or the sandbox ends, so even dead it keeps its pid.
	pid := cmd.Process.Pid
	err = m.helpers.WriteMaps(ctx, pid, m.uids, m.gids)
	if err == nil {
		_, err = release.Write([]byte{1})
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return cmd, nil
}
