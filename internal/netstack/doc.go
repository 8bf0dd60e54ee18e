// Package netstack is the host side of a sandbox's network: a userspace
// TCP/IP stack (gVisor tcpip) on the file descriptor that carries the
// sandbox's Ethernet frames, with a gateway that is also the sandbox's DNS
// server, and forwarders that decide every flow with the sandbox's
// policy.Policy.
//
// # Addresses
//
// The sandbox side (see Config.SandboxSide) gets a static address,
// 10.88.0.2/24 by default, a default route via the gateway, 10.88.0.1 by
// default, and the gateway as its only name server. The host kernel routes
// nothing for the sandbox: every frame ends in this package's stack.
//
// # Data path
//
//   - DNS at gateway:53, over UDP and TCP: a question is answered only when
//     policy.NameResolvable allows the name, else NXDOMAIN (a "dns" event,
//     blocked). A and AAAA are resolved upstream (policy.DNSServers, or the
//     host's resolver), answers that policy.AddrAllowed refuses are dropped,
//     and the rest are recorded in the sandbox's PinSet. Other record types
//     get an empty answer without any upstream query, so DNS cannot carry
//     data to or from names that are not allowed.
//   - TCP: each new connection is matched by destination address to the names
//     pinned for it. When one of those names is an allowed host on the
//     connection's port (policy.HostPortAllowed: ports 80 and 443, or the
//     port a pattern names) and the address is allowed, the connection is
//     accepted and its first bytes are sniffed: a TLS ClientHello goes to
//     Config.Interceptor's ServeTLS, an HTTP request to its ServeHTTP, and
//     the interceptor checks every SNI and Host against the pinned names
//     and the port. Anything else passes only when policy.FlowAllowed("tcp",
//     names, ip, port) accepts it (an egress rule); otherwise it is reset,
//     with a "tcp" event (port_not_allowed, with how to open the port, when
//     a pinned name is allowed on other ports). A flow that an egress rule allows is dialled first, and bytes
//     that upstream sends before the sandbox speaks (a server-first protocol)
//     send it straight to forwarding. Upstream is always dialled at the
//     destination address (never a second resolution) with a dialer whose
//     Control hook checks the address again at connect time.
//   - UDP other than DNS passes only when FlowAllowed("udp", ...) accepts it;
//     otherwise it is dropped, with a "udp" event.
//   - ICMP is never forwarded. IPv6 packets get exactly the same decisions as
//     IPv4 ones.
//   - The gateway's own address answers DNS only: every other port is
//     refused.
//
// Everything is bounded: connections and UDP flows in flight, TCP
// handshakes being decided, DNS message sizes, concurrent queries and
// DNS-over-TCP connections, the pin set, and the event queue (events
// that cannot be queued are dropped and counted, never blocking the
// stack). A refusal by one of the caps is a "limit" event, at most one a
// second per cap, with a count of the refusals in between.
package netstack
