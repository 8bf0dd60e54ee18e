// Package rpc serves airlock's JSON-RPC 2.0 protocol (package api) on a
// byte stream: stdin/stdout for `airlock rpc`, or a detached sandbox's
// control socket.
//
// One message per line. Many requests may be in flight and responses come
// out of order; each carries its request's id exactly as sent. Every
// operation is carried out by the embed API (package airlock).
//
// Choices this server makes where JSON-RPC 2.0 leaves room:
//
//   - Batches (JSON arrays) are refused with CodeInvalidRequest: send one
//     request per line, they run concurrently anyway.
//   - params must be an object (or absent/null); positional params are
//     refused. Unknown fields are ignored, so that newer clients work
//     with older servers; fields of the wrong type are refused with
//     CodeInvalidParams naming the field.
//   - A request id may be a number, a string or null; an exec is
//     referred to (by "stdin", "signal", "resize", "cancel") with its
//     request's id as sent. Two running execs may not share an id.
//   - A line longer than Options.MaxMessage is discarded without being
//     buffered and answered with CodeLimitExceeded and id null.
//   - At most Options.MaxInFlight requests and Options.MaxInFlightBytes
//     bytes of request lines are handled at once; beyond that the server
//     stops reading until some finish. A small reserve lets "cancel",
//     "signal", "resize", "close", "info", "events.*", "policy.*",
//     "port_forward", "port_forward_close", "pool.close" and "pool.list"
//     through when long-running execs hold every slot.
//   - Events are delivered to the session from the start; each sandbox's
//     queue holds a bounded number and drops the rest, counting them (the
//     next event's "dropped", and "events_dropped" in "info").
//   - Pools ("pool.create") belong to the session that made them, and
//     "create" with "pool" takes from the session's own pools only.
//     When the session ends its pools are closed, with the sandboxes
//     still waiting in them, before its sandboxes are.
//   - When the input ends or the context is cancelled, every request in
//     flight is cancelled (execs are killed), the session's own sandboxes
//     are closed, and Serve returns: keep the input open until you have
//     the responses you want.
package rpc
