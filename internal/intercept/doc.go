// Package intercept serves the sandbox's HTTP and TLS connections on the
// host: it terminates the sandbox's TLS with certificates of a per-user
// CA, applies the network policy (package policy) to every request, and
// forwards what passes to the destination the sandbox chose.
//
// # Data path
//
// The netstack accepts every TCP connection from the sandbox, sniffs its
// first bytes and hands a connection that carries TLS to ServeTLS, one
// that carries plaintext HTTP to ServeHTTP, with the address the sandbox
// connected to (dst) and the names DNS pinned to that address.
//
//   - TLS: the ClientHello's server name (SNI) must be present, a name
//     rather than an address, one of the pinned names, and allowed by
//     policy.HostPortDecision (the name, on dst's port); otherwise the
//     handshake is refused and a "tcp" event says why (no_sni,
//     sni_mismatch, or the policy's reason, port_not_allowed among them). This
//     stops a forged SNI, or a raw-IP connection to an allowed host's
//     address, from reaching anything but the names that address was
//     resolved for. The sandbox gets a leaf certificate for the name
//     (CA.Leaf, cached) and may speak HTTP/2 or HTTP/1.1 (ALPN).
//   - Every request, TLS or plain, HTTP/1 or HTTP/2: CONNECT is refused
//     (the sandbox has no proxy). The request's authority (Host,
//     :authority, or an absolute-form URI's host) must be a name; a port
//     in it must be dst's port; under TLS the name must equal the SNI (no
//     domain fronting), in plain HTTP it must be one of the pinned names;
//     and policy.HostPortDecision must allow it on dst's port (the host lists can change
//     while a connection is open). Refusals answer 421 (misdirected), 400
//     (malformed) or 403 (policy), with "airlock: blocked: <reason>" as
//     the body and the reason code in X-Airlock-Blocked.
//   - Hooks: the policy's request hooks (policy.FilterRequest) see the
//     request with placeholders, never secret values, and its body when
//     it is no longer than policy.MaxHookBody (a longer one streams and
//     hooks see none). They may change it or block it (403).
//   - Secrets: then placeholders are replaced for the request's host
//     (policy.SubstituterFor, over TLS or not) in the URL, every header
//     value and the body. A placeholder of a secret not scoped to the
//     host blocks the request (403, secret_leak), and so does such a
//     secret's value in the forms ordinary software writes it in; a
//     placeholder of a secret scoped to the host in a plain-HTTP request
//     blocks it too (secret_plaintext) unless the secret allows plain
//     HTTP; so does a compressed body or one past Config.MaxBody
//     (secret_unrewritable) when the policy has secrets.
//     Bodies stream through the substitution: a short body of declared
//     length is read whole (so it keeps its Content-Length and a leak in
//     it stops the request before anything is sent); a longer one is sent
//     as it is rewritten, without a length, and a leak found in it (or
//     its passing Config.MaxBody) aborts the upstream request before it
//     completes and answers 403; one whose declared length passes
//     Config.MaxBody is refused before anything is sent. Request
//     trailers are dropped, since they would carry placeholders past the
//     substitution.
//   - Upstream: each sandbox connection has its own http.Transport, whose
//     every connection is a Config.Dial to dst (the host never resolves a
//     name again), verified against the host's roots and the policy's
//     extra roots with the SNI as the server name, HTTP/2 or HTTP/1.1. No
//     proxy from the environment; Accept-Encoding and compressed bodies
//     pass untouched. Its idle connections are closed when the sandbox's
//     connection ends.
//   - Responses stream back (server-sent events and chunked bodies are
//     flushed as they arrive). Secret values in the header, body and
//     trailers become placeholders again (a scrubbed body loses its
//     Content-Length): the values of the secrets scoped to the request's
//     host always, as they went out (policy.ResponseScrubber), and every
//     secret's value when the policy scrubs responses; interim (1xx)
//     responses, which pass before the final one, are scrubbed alike.
//     Such a response is asked for, and passed on, whole and without
//     content coding: Range and If-Range are dropped from its request
//     (a value read back in ranges would come in pieces no scrubber can
//     recognise) and a partial response is refused (secret_unrewritable);
//     gzip and deflate (zlib-wrapped or bare) are decoded, another coding
//     is refused.
//     Response hooks
//     (policy.FilterResponse) see the scrubbed response, its body when it
//     is short enough, and may change it or block it (403).
//   - A WebSocket upgrade passes the same checks. When the policy has no
//     secret, the upgraded connection is then spliced as it is.
//     Otherwise its frames get the secret handling of bodies (package
//     wsframe parses and writes them): the upgrade offers no extension
//     (permessage-deflate would compress the payloads), and an upstream
//     that takes one anyway fails it (502). Each message the sandbox
//     sends goes through the substitution as a stream, whatever its
//     fragmentation (a placeholder may straddle frames, and a message may
//     leave in other frames than it came in, as RFC 6455 lets an
//     intermediary do); pings, pongs and a close frame's reason are
//     substituted whole; the frames leave masked with fresh keys. The
//     upstream's messages and control frames are scrubbed as response
//     bodies are. A placeholder of a secret not
//     scoped to the host (secret_leak), a frame with RSV bits set
//     (compressed, or of an extension), a control frame a value would
//     take past 125 bytes or a frame past 16 MiB (secret_unrewritable),
//     or one that breaks the protocol (bad_request) stops the WebSocket:
//     nothing more goes upstream, whose connection is closed, and the
//     sandbox gets a close frame with the reason (status 1008, 1009 or
//     1002). The same faults in the upstream's frames close it too (1002
//     or 1009, not a block). Other upgrades (h2c, which would carry
//     further requests past every check) are not passed on: the request
//     goes without them.
//
// Each HTTP request yields exactly one api.NetworkEvent of kind "http"
// once its response is over (or refused), with the URL as the hooks saw
// it (placeholders, never values), the status, the body bytes each way,
// and, when blocked, the reason (the bytes of a WebSocket after the
// switch are not counted). A WebSocket's event, status 101, goes out
// when the WebSocket is over, and is the one blocked by a fault in the
// sandbox's frames; should such a block come after that event went out,
// one more event of kind "http" for the same URL, status 101, says it
// (blocked, with the reason). A TLS handshake refused before any request
// yields one of kind "tcp".
//
// # At the edges of HTTP
//
// The interceptor behaves as a proxy does: a client that half-closes
// its connection once its request is sent still gets the response (the
// EOF is held while the request is served); Expect: 100-continue is
// answered once, by the interceptor as it starts to read the body, and
// not forwarded; an upstream that sends no response header within the
// policy's response header timeout gets the sandbox a 504 (upstream_error,
// saying timeout); a sandbox that went away gets nothing, never a
// made-up response.
//
// # Bounds
//
// Nothing from the sandbox is trusted: the handshake has 10 seconds, a
// request header 30 seconds and 64 KiB, an idle connection 2 minutes; an
// HTTP/2 connection has at most 100 concurrent streams; bodies are
// buffered only up to the hooks' bound and streamed otherwise. WebSocket
// frames, the sandbox's and the upstream's, declare at most 16 MiB each
// and stream; at most 32 KiB of a message is held at a time.
//
// # Known limits
//
// A request whose response is scrubbed asks for no content coding
// (Accept-Encoding: identity), and a gzip or deflate body that comes
// anyway reaches the sandbox decoded; a response in any other coding is
// refused (secret_unrewritable). A WebSocket cannot use
// permessage-deflate when the policy has secrets.
package intercept
