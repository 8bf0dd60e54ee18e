package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/tap"
)

// maxFrame bounds a frame relayed either way: an Ethernet header and
// the largest MTU a TAP device takes.
const maxFrame = 14 + 65535

// relayLink makes the sandbox's interface where the host cannot take
// its file (inside gVisor's Sentry, whose devices are its own): a TAP
// device of this network stack, whose frames it copies to and from the
// datagram socket l.FD, one frame per datagram, for as long as both
// exist. The host's network stack is at the socket's other end.
func relayLink(l *agentproto.LinkSpec) error {
	c, err := tapConfig(l)
	if err != nil {
		unix.Close(l.FD)
		return err
	}
	dev, err := tap.CreateHere(c)
	if err != nil {
		unix.Close(l.FD)
		return err
	}
	if err := unix.SetNonblock(l.FD, true); err != nil {
		dev.Close()
		unix.Close(l.FD)
		return err
	}
	unix.CloseOnExec(l.FD)
	sock := os.NewFile(uintptr(l.FD), "frames")
	go relayFrames(dev, sock)
	go relayFrames(sock, dev)
	return nil
}

// relayFrames copies frames from src to dst, each read one frame, until
// either ends; each direction has its own, so that a full side stalls
// only the frames bound for it. A frame the socket refuses for its size
// is dropped, as a link drops a frame over its MTU.
func relayFrames(src, dst *os.File) {
	buf := make([]byte, maxFrame)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EMSGSIZE) {
			return
		}
	}
}
