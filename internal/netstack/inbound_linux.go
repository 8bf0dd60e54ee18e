package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// inboundDialTimeout bounds the handshake with the sandbox of a
// connection from the host to one of its ports.
const inboundDialTimeout = 10 * time.Second

// ErrClosed is returned for work asked of a Stack that is closed.
var ErrClosed = errors.New("netstack: the sandbox's network is closed")

// ForwardInbound connects, from the gateway's address, to port of the
// sandbox's own address, and splices that connection with c, a
// connection accepted on the host, both ways, passing half-closes on,
// until both directions are done; c is closed when it returns. This is
// how a published port reaches the sandbox: it goes in through the
// stack and never through the egress policy, which decides only what
// the sandbox opens. When nothing in the sandbox listens on port (or
// the handshake fails), c is reset and the error says why; it matches
// ErrClosed when the stack closed, and ctx's error when ctx ended.
func (st *Stack) ForwardInbound(ctx context.Context, c *net.TCPConn, port uint16) (sent, received int64, err error) {
	if !st.enter() {
		c.Close()
		return 0, 0, ErrClosed
	}
	defer st.wg.Done()
	dctx, cancel := context.WithTimeout(ctx, inboundDialTimeout)
	defer cancel()
	// Closing the stack ends a handshake under way.
	stop := context.AfterFunc(st.ctx, cancel)
	defer stop()
	to := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(st.cfg.SandboxV4.Addr().As4()), Port: port}
	conn, err := gonet.DialContextTCP(dctx, st.s, to, ipv4.ProtocolNumber)
	if err != nil {
		// Why, before the host's client can see it: the caller may stop
		// the forward once it has.
		switch {
		case st.ctx.Err() != nil:
			err = ErrClosed
		case ctx.Err() != nil:
			err = fmt.Errorf("connect to port %d of the sandbox: %w", port, ctx.Err())
		default:
			err = fmt.Errorf("connect to port %d of the sandbox (%s): %w", port, st.cfg.SandboxV4.Addr(), err)
		}
		// A reset tells the host's client at once that nothing answered.
		_ = c.SetLinger(0)
		c.Close()
		return 0, 0, err
	}
	if !st.track(conn, c) {
		return 0, 0, ErrClosed
	}
	defer st.untrack(conn, c)
	// The end of ctx (the port stopped) ends the connection both ways,
	// whether or not the sandbox's side is still talking.
	unhook := context.AfterFunc(ctx, func() { conn.Close(); c.Close() })
	defer unhook()
	// splice's first side is the one it reads "sent" from: the host.
	sent, received = splice(c, conn)
	return sent, received, nil
}

// SandboxAddr returns the sandbox's IPv4 address.
func (st *Stack) SandboxAddr() string { return st.cfg.SandboxV4.Addr().String() }
