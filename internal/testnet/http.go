package testnet

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Request is a request as one of the World's HTTP servers received it.
type Request struct {
	// Server is the address the connection arrived at ("ip:port").
	Server netip.AddrPort
	// Name is the primary name of the site ("api.example.com"), or
	// "private" for the private servers.
	Name string
	// Remote is the client's address as the server saw it.
	Remote string

	Method string
	// URI is the request target as sent: origin form ("/echo?a=1"), or
	// absolute form for a request written for a proxy.
	URI      string
	Host     string
	Path     string // escaped, as in the request
	RawQuery string
	Header   http.Header // without Host (see Host)
	// Body is what /echo read of the body; the other paths leave it nil.
	Body  []byte
	Proto string // "HTTP/1.1" or "HTTP/2.0"
	TLS   bool
	SNI   string // the server name the client sent, if TLS
	// Messages is what /ws received: the payload of each data message,
	// its fragments joined.
	Messages [][]byte
}

// Echo is the JSON that /echo answers with.
type Echo struct {
	Method string `json:"method"`
	URI    string `json:"uri"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	Query  string `json:"query"`
	// Headers has each header under its canonical name, several values
	// joined with ", ".
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Proto   string            `json:"proto"`
	TLS     bool              `json:"tls"`
	SNI     string            `json:"sni"`
	Server  string            `json:"server"`
	Remote  string            `json:"remote"`
}

type requestKey struct{}

// record adds r to the log and returns its entry, which the handler may
// complete (with the body) under w.mu.
func (w *World) record(r *http.Request, name string) *Request {
	var server netip.AddrPort
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		server = addrPort(a)
	}
	req := &Request{
		Server:   server,
		Name:     name,
		Remote:   r.RemoteAddr,
		Method:   r.Method,
		URI:      r.RequestURI,
		Host:     r.Host,
		Path:     r.URL.EscapedPath(),
		RawQuery: r.URL.RawQuery,
		Header:   r.Header.Clone(),
		Proto:    r.Proto,
		TLS:      r.TLS != nil,
	}
	if r.TLS != nil {
		req.SNI = r.TLS.ServerName
	}
	w.mu.Lock()
	w.reqs = append(w.reqs, req)
	w.mu.Unlock()
	return req
}

// Requests is the requests that the servers matching server received, in
// order of arrival; server is in the form Reached takes, and "" matches
// every server.
func (w *World) Requests(server string) []Request {
	match := func(netip.AddrPort) bool { return true }
	if server != "" {
		match = matcher(server)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Request
	for _, r := range w.reqs {
		if match(r.Server) {
			c := *r
			c.Header = r.Header.Clone()
			c.Body = append([]byte(nil), r.Body...)
			c.Messages = make([][]byte, len(r.Messages))
			for i, m := range r.Messages {
				c.Messages[i] = append([]byte(nil), m...)
			}
			out = append(out, c)
		}
	}
	return out
}

// LastRequest is the last request that the servers matching server
// received (in the form Reached takes: "203.0.113.10:443",
// "api.example.com" for all its addresses and ports, "api.example.com:80"),
// and whether there was one. This is what actually arrived upstream.
func (w *World) LastRequest(server string) (Request, bool) {
	reqs := w.Requests(server)
	if len(reqs) == 0 {
		return Request{}, false
	}
	return reqs[len(reqs)-1], true
}

// Release lets every /hold request that is holding now finish, and
// returns how many there were. A /hold request holds from before its
// first event is sent, so a client that has read the first event can
// Release it.
func (w *World) Release() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.holds)
	for ch := range w.holds {
		close(ch)
		delete(w.holds, ch)
	}
	return n
}

// patternBuf is one period of Pattern's bytes, repeated to about 64 KiB;
// its length is a multiple of the period, so that writes of it in a row
// go on with the pattern.
var patternBuf = func() []byte {
	b := make([]byte, 251*256)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

// Pattern is the first n bytes that /bytes serves: byte i is i mod 251.
func Pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// siteHandler serves the paths of a public site.
func (w *World) siteHandler(s *site) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(rw, "hello from %s\n", s.name)
	})
	mux.HandleFunc("/echo", w.echo)
	mux.HandleFunc("/sse", w.sse)
	mux.HandleFunc("/hold", w.hold)
	mux.HandleFunc("/chunked", chunked)
	mux.HandleFunc("/bytes", serveBytes)
	mux.HandleFunc("/discard", discard)
	mux.HandleFunc("/ws", w.websocket)
	mux.HandleFunc("/status/{code}", status)
	mux.HandleFunc("/store/{key}", w.store(s))
	mux.HandleFunc("/deflate", deflated)
	mux.HandleFunc("/slow", w.slow)
	mux.Handle(GitRepo+"/", w.gitHandler(s))
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		req := w.record(r, s.name)
		mux.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), requestKey{}, req)))
	})
}

// privateHandler answers every request with "PRIVATE <addr>".
func (w *World) privateHandler(addr string) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.record(r, "private")
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(rw, "PRIVATE %s\n", addr)
	})
}

func (w *World) echo(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := r.Context().Value(requestKey{}).(*Request)
	w.mu.Lock()
	req.Body = body
	w.mu.Unlock()

	e := Echo{
		Method:  req.Method,
		URI:     req.URI,
		Host:    req.Host,
		Path:    req.Path,
		Query:   req.RawQuery,
		Headers: make(map[string]string, len(req.Header)),
		Body:    string(body),
		Proto:   req.Proto,
		TLS:     req.TLS,
		SNI:     req.SNI,
		Server:  req.Server.String(),
		Remote:  req.Remote,
	}
	for k, v := range r.Header {
		e.Headers[k] = strings.Join(v, ", ")
	}
	rw.Header().Set("Content-Type", "application/json")
	var out io.Writer = rw
	if intParam(r, "gzip", 0) == 1 {
		// A server that compresses whatever the client accepts.
		rw.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(rw)
		defer zw.Close()
		out = zw
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	_ = enc.Encode(e)
}

// intParam is the query parameter name of r as an int, or def.
func intParam(r *http.Request, name string, def int64) int64 {
	if v := r.URL.Query().Get(name); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return def
}

func startEvents(rw http.ResponseWriter) {
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
}

func (w *World) sse(rw http.ResponseWriter, r *http.Request) {
	n := intParam(r, "n", 3)
	gap := time.Duration(intParam(r, "gap_ms", 200)) * time.Millisecond
	rc := http.NewResponseController(rw)
	startEvents(rw)
	for i := int64(1); i <= n; i++ {
		if i > 1 {
			t := time.NewTimer(gap)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			case <-w.closing:
				t.Stop()
				return
			}
		}
		if _, err := fmt.Fprintf(rw, "data: %d\n\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func (w *World) hold(rw http.ResponseWriter, r *http.Request) {
	release := make(chan struct{})
	w.mu.Lock()
	w.holds[release] = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.holds, release)
		w.mu.Unlock()
	}()
	rc := http.NewResponseController(rw)
	startEvents(rw)
	if _, err := io.WriteString(rw, "data: held\n\n"); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}
	select {
	case <-release:
		_, _ = io.WriteString(rw, "data: released\n\n")
	case <-r.Context().Done():
	case <-w.closing:
	}
}

func chunked(rw http.ResponseWriter, r *http.Request) {
	n := intParam(r, "n", 5)
	rc := http.NewResponseController(rw)
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for i := int64(1); i <= n; i++ {
		if _, err := fmt.Fprintf(rw, "chunk %d\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func serveBytes(rw http.ResponseWriter, r *http.Request) {
	n := intParam(r, "n", 1024)
	rw.Header().Set("Content-Type", "application/octet-stream")
	rw.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	if r.Method == http.MethodHead {
		return
	}
	for n > 0 {
		b := patternBuf[:min(n, int64(len(patternBuf)))]
		if _, err := rw.Write(b); err != nil {
			return
		}
		n -= int64(len(b))
	}
}

func discard(rw http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, "{\"bytes\": %d}\n", n)
}

func status(rw http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.PathValue("code"))
	if err != nil || code < 200 || code > 599 {
		http.Error(rw, "status must be 200 to 599", http.StatusBadRequest)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(code)
	fmt.Fprintf(rw, "status %d\n", code)
}
