package intercept

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// emit hands an event to Config.OnEvent.
func (i *Interceptor) emit(ev api.NetworkEvent) {
	if i.onEvent != nil {
		i.onEvent(ev)
	}
}

// event returns an event of the exchange with what every one of them
// says: the request, where it went, and how long it has taken. The URL
// is the sandbox's (with placeholders), with any secret value it holds
// (one that the sandbox tried to send) redacted.
func (x *exchange) event() api.NetworkEvent {
	return api.NetworkEvent{
		Kind:       api.NetHTTP,
		Method:     x.method,
		URL:        x.c.i.policy.Redact(x.url),
		Host:       x.c.i.policy.RedactName(x.host),
		IP:         x.c.dst.Addr().String(),
		Port:       x.c.dst.Port(),
		Proto:      "tcp",
		DurationMs: time.Since(x.start).Milliseconds(),
	}
}

// finish ends an exchange: it emits the request's one event, once the
// response is over or refused. It is deferred by the handler, so that a
// panic (http.ErrAbortHandler when a streamed response breaks) still
// reports the request; the panic then goes on.
func (x *exchange) finish() {
	p := recover()
	if p != nil && x.reason == "" && x.blocked.Load() == nil && x.ctx.Err() == nil {
		// The response broke while it streamed, and not because the
		// sandbox went away.
		x.reason = policy.ReasonUpstreamError + ": the response was cut off"
	}
	ev := x.event()
	ev.StatusCode = x.w.status
	ev.RequestBytes, ev.ResponseBytes = x.reqBytes.Load(), x.w.bytes
	ev.Blocked, ev.Reason = x.isBlocked, x.reason
	if ev.StatusCode == 0 && x.switched {
		ev.StatusCode = http.StatusSwitchingProtocols
	}
	if be := x.blocked.seal(); be != nil && !x.isBlocked {
		// Found while the body streamed, after the response began, or
		// in a WebSocket's frames.
		ev.Blocked, ev.Reason = true, be.Error()
	}
	x.c.i.emit(ev)
	if p != nil {
		panic(p)
	}
}

// refuse answers the sandbox with a block: status, the reason code in
// X-Airlock-Blocked, and "airlock: blocked: <reason>" as the body.
func (x *exchange) refuse(status int, reason string) {
	x.isBlocked = true
	x.reason = reason
	x.c.i.log.Debug("request blocked", "method", x.method, "url", x.c.i.policy.Redact(x.url), "dst", x.c.dst, "reason", reason)
	writeMessage(x.w, status, "X-Airlock-Blocked", policy.ReasonCode(reason), "airlock: blocked: "+reason)
}

// fail answers the sandbox with an error that is not a block (the
// upstream failed).
func (x *exchange) fail(status int, reason string) {
	x.reason = reason
	x.c.i.log.Debug("request failed", "method", x.method, "url", x.c.i.policy.Redact(x.url), "dst", x.c.dst, "reason", reason)
	writeMessage(x.w, status, "X-Airlock-Error", policy.ReasonCode(reason), "airlock: "+reason)
}

// writeMessage writes a short plain-text response of the interceptor's
// own, with a header naming the reason code.
func writeMessage(w http.ResponseWriter, status int, header, code, msg string) {
	h := w.Header()
	clear(h)
	if !validToken(code) {
		code = policy.ReasonPolicyError
	}
	body := msg + "\n"
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set(header, code)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// validToken reports whether a reason code can go into a header as it
// is.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// recorder is the sandbox's ResponseWriter, counting what the event
// reports. Flush and Hijack reach the writer underneath through Unwrap
// (http.ResponseController).
type recorder struct {
	http.ResponseWriter
	status int   // the final status, 0 until written
	bytes  int64 // body bytes written
}

// WriteHeader passes the status on, except a 100 Continue from
// upstream: the server sends its own when the body is first read (the
// expectation is not forwarded), and a second one would confuse the
// sandbox's client.
func (r *recorder) WriteHeader(code int) {
	if code == http.StatusContinue {
		return
	}
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush is here for callers that look for http.Flusher directly.
func (r *recorder) Flush() {
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// blockSlot records the first block found while a body streams, or in
// a WebSocket's frames.
type blockSlot struct {
	p atomic.Pointer[policy.BlockError]

	mu     sync.Mutex
	sealed bool // the exchange's event has taken the block
}

func (s *blockSlot) Load() *policy.BlockError { return s.p.Load() }

func (s *blockSlot) note(be *policy.BlockError) { s.p.CompareAndSwap(nil, be) }

// seal returns the block for the exchange's event; noteOpen notes no
// block after it.
func (s *blockSlot) seal() *policy.BlockError {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed = true
	return s.p.Load()
}

// noteOpen notes be, unless the exchange's event has gone out already
// (then it reports false).
func (s *blockSlot) noteOpen(be *policy.BlockError) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		return false
	}
	s.note(be)
	return true
}
