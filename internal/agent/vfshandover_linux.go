package agent

import (
	"errors"
	"fmt"
	"io"

	"github.com/fxamacker/cbor/v2"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// handOver gives each mounted FUSE device to the host, which serves the
// mount itself (RootSpec.VFSChan), and keeps none: a request then goes
// from the kernel to the host's server and back, with no process of the
// sandbox in between, and no thread of the agent waiting on a mount can
// keep the mounts, or the sandbox, alive once it is killed. It returns
// once the host serves every mount, or with the host's reason why not.
func (m *vfsMounts) handOver() error {
	defer func() {
		unix.Close(m.hostChan)
		m.hostChan = 0
	}()
	defer m.closeDevices()
	// The host answers once the kernel's handshake is made: no wait on
	// anything of the sandbox's.
	tv := unix.NsecToTimeval(agentproto.SpawnerSetupTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(m.hostChan, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("programmable mounts: the host's channel: %w", err)
	}
	buf := make([]byte, agentproto.MaxFUSEHandover)
	for _, t := range sortedTargets(m.devs) {
		// The mount's device number, read without a request: the
		// mount has no server yet.
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, t, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil {
			return fmt.Errorf("programmable mount %s: %w", t, err)
		}
		b, err := cbor.Marshal(agentproto.FUSEHandover{Target: t, DevMajor: st.Dev_major, DevMinor: st.Dev_minor})
		if err != nil {
			return err
		}
		if len(b) > agentproto.MaxFUSEHandover {
			return fmt.Errorf("programmable mount %s: its target is too long", t)
		}
		if err := sendRetry(m.hostChan, b, unix.UnixRights(int(m.devs[t].Fd()))); err != nil {
			return fmt.Errorf("programmable mount %s: hand its device to the host: %w", t, err)
		}
		var ans agentproto.FUSEServed
		if err := recvAnswer(m.hostChan, buf, &ans); err != nil {
			return fmt.Errorf("programmable mount %s: the host's answer: %w", t, err)
		}
		if ans.Err != "" {
			return fmt.Errorf("programmable mount %s: %s", t, ans.Err)
		}
		// The host holds the device now.
		m.devs[t].Close()
		delete(m.devs, t)
	}
	return nil
}

func sendRetry(fd int, b, oob []byte) error {
	for {
		err := unix.Sendmsg(fd, b, oob, nil, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// recvAnswer reads one message from the blocking SOCK_SEQPACKET socket
// fd into v.
func recvAnswer(fd int, buf []byte, v any) error {
	b, err := recvPacket(fd, buf)
	switch {
	case errors.Is(err, unix.EAGAIN):
		return fmt.Errorf("none within %s", agentproto.SpawnerSetupTimeout)
	case errors.Is(err, io.EOF):
		return errors.New("the host closed the channel")
	case err != nil:
		return err
	}
	return agentproto.Unmarshal(b, v)
}
