// Package policy decides what may leave a sandbox: which host names its
// HTTP and TLS requests may reach, which upstream addresses may be
// dialled, which other flows pass, where secrets are substituted for
// their placeholders, and what the policy script and Go hooks say about
// each request and response. It does no networking: the netstack calls
// it.
//
// # Deny by default, fail closed
//
// The zero Config allows nothing: no allowed_hosts means no egress.
// Private, loopback, link-local, metadata and other special addresses
// are blocked unless a CIDR rule inside them lifts the block. A script
// fault, a step, time or allocation limit, a hook error, a placeholder bound for the
// wrong host and a body that cannot be scanned all block.
//
// # What a netstack integrator calls, and when
//
//   - DNS question: NameResolvable(name). Then AddrAllowed for each
//     answer: drop the blocked ones. Record what remains in the pin set.
//   - TCP connection that may carry HTTP or TLS: HostPortAllowed(name,
//     port) for a name pinned to its address (an allowed_hosts pattern
//     opens ports 80 and 443, or the one port it names).
//   - TLS ClientHello: HostPortDecision(sni, port), and the SNI must be
//     among the names pinned to the destination address. HTTP request:
//     HostPortDecision on the Host header or :authority without its port
//     (the port connected to), which must equal the SNI under TLS, or be
//     pinned to the destination for plain HTTP.
//   - Any other TCP or UDP flow: FlowAllowed(proto, pinnedNames, ip,
//     port). DNS to the gateway is not a flow: it never reaches this.
//   - Before every upstream dial, in the dialer's Control hook, whatever
//     was decided before (the dial goes to an address the host resolved,
//     never through a second resolution): AddrAllowed(ip) for HTTP and
//     TLS; FlowAllowed again, with the same arguments, for other flows
//     (a CIDR egress rule inside a blocked range lifts that block for
//     the flows it allows only, so AddrAllowed alone would refuse them).
//   - Each HTTP request: FilterRequest (hooks see placeholders), then
//     Substituter(host).Request, or URL and Header on the fields and
//     Reader(body, limit) on a streamed body, after CheckBodyEncoding.
//     Any error blocks, with ReasonOf(err) as the event's reason.
//   - Each response: ResponseScrubber(sub) (the values of the secrets
//     scoped to the request's host always; every secret's value with
//     scrub_responses), then FilterResponse.
//
// Reason strings are "code" or "code: detail"; ReasonCode extracts the
// code, one of the Reason constants.
//
// # Host names
//
// Names are matched as ASCII: lower-cased, one trailing dot removed,
// labels of letters, digits, '-' and '_'. A name with other bytes, or
// that is an address in any form a resolver accepts (including 127.1 and
// 0x7f000001), matches nothing. Patterns may be written in Unicode; they
// are converted to punycode. "*.example.com" matches subdomains at any
// depth but not example.com; "*" matches any public host (two labels or
// more, outside localhost, local, internal, arpa, test, invalid, onion
// and alt).
//
// # The policy script
//
// policy_script is Starlark, compiled once by New (syntax errors carry
// the line). It may define any of is_host_allowed(host),
// on_request(req), on_response(resp, req) and on_file(op, path, size)
// (see File hooks). A host must pass allowed_hosts and is_host_allowed
// when both exist: the script can narrow the allowlist, never widen it.
// req has method, url, host (read-only), headers (a dict of canonical
// names to lists of strings; a string is taken as one value) and body
// (a string, or None when it is streamed); resp has status_code,
// headers and body. Fields are attributes (req.headers) or
// keys (req["headers"]). Returning None blocks. Each call is bounded in
// steps, time and bytes allocated (Options.ScriptMaxAlloc: the script is
// rewritten so that whatever makes a value of a size that depends on
// data is charged, since Starlark counts no memory); a policy runs at
// most Options.ScriptConcurrency calls at once and the process
// DefaultScriptProcessConcurrency (Options.ScriptGate), beyond which a
// call waits up to the script timeout, then fails. Names starting with
// _airlock_ are reserved; load() is refused. Scripts never see secret
// values.
//
// # File hooks
//
// on_file(op, path, size) is asked before each change to a file in a
// programmable mount (FileDecision; HasFileHook says whether the script
// defines it). op is one of:
//
//   - "open": an existing file opened for writing;
//   - "create": a new file (a FIFO or a UNIX socket's name too);
//   - "write": a write, size being the bytes written;
//   - "truncate": size being the new length;
//   - "remove": a file or an empty directory;
//   - "rename": asked once with the old path and once with the new, and
//     both must allow;
//   - "link": path being the new name of a hard link;
//   - "mkdir", "symlink" (path being the link's), "chmod", "chown",
//     "utimens".
//
// path is the file's path as the sandbox sees it (absolute and clean,
// such as "/workspace/out.txt"); size is 0 but for write and truncate.
// on_file returns True to allow, False to deny with EACCES, or the name
// of the errno to deny with, such as "EPERM", "EROFS", "ENOSPC" or
// "EDQUOT" (one of EACCES, EAGAIN, EBADF, EBUSY, ECANCELED, EDEADLK,
// EDQUOT, EEXIST, EFBIG, EINTR, EINVAL, EIO, EISDIR, ELOOP, EMFILE,
// EMLINK, ENAMETOOLONG, ENFILE, ENODEV, ENOENT, ENOLCK, ENOMEM, ENOSPC,
// ENOSYS, ENOTDIR, ENOTEMPTY, ENOTSUP, ENXIO, EOPNOTSUPP, EPERM, EROFS,
// ESTALE, ETIMEDOUT, ETXTBSY, EWOULDBLOCK, EXDEV). Anything else (None,
// another type, an unknown name) is a script error, and a script error
// denies with EACCES, as does a step, time or allocation limit. Reads,
// stats and directory listings are not asked about.
//
// # Secrets
//
// Each secret gets a placeholder, AIRLOCK_SECRET_<name>_<32 hex digits
// from crypto/rand>, the only thing the sandbox's environment holds.
// Requests over TLS to a host a secret is scoped to get the value in
// place of the placeholder in their URL (percent-encoded), headers
// (Basic credentials decoded and encoded again) and body; in plain HTTP
// only when the secret has allow_plaintext, and otherwise the
// placeholder blocks the request (ReasonSecretPlaintext). A placeholder
// of a secret not scoped to the host is a leak and blocks the request,
// and so is the secret's value itself, in each form ordinary software
// writes it in (as it is, percent-encoded, JSON-escaped, base64 at any
// offset, hex: see MinValueLen), should the sandbox have come by it.
// A value is only ever written into a request to a host it is scoped
// to; the leak check finds placeholders as the sandbox wrote them, so
// one hidden by an encoding (percent-encoding, base64 other than Basic
// credentials) goes out as the worthless placeholder it is. Bodies that
// cannot be scanned (CheckBodyEncoding) or are too long for the caller
// to re-frame (Reader's limit) block.
package policy
