// Package httpclient is the HTTP client of the benchmark's egress
// section: one program (bench/cmd/airlock-httpclient) that the benchmark
// runs both directly and inside a sandbox, so that the two differ only in
// the path their packets take. It times requests itself and reports them
// as a Result, in JSON on its standard output.
//
// It speaks HTTP/1.1 only, over IPv4 only, with Go's own resolver and
// the system's trust store (SSL_CERT_FILE when set): the same protocol
// and the same work on both paths, whatever either side offers.
package httpclient

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Modes.
const (
	// KeepAlive sends Warmup untimed requests and then Count timed
	// ones, one after another, on one kept-alive connection.
	KeepAlive = "keepalive"
	// NewConn opens a fresh TCP connection, with a fresh TLS handshake
	// for https, for every request: Warmup untimed requests, then Count
	// timed rounds, each round one request to every URL in order. The
	// name is resolved anew for each connection.
	NewConn = "newconn"
	// Bulk sends Warmup untimed requests (to WarmupURL, a small one, to
	// open the connection), then times Count GETs of URLs[0] on that
	// connection, one after another, each read to the end of its body.
	Bulk = "bulk"
)

// Options say what to run.
type Options struct {
	Mode   string
	URLs   []string
	Count  int
	Warmup int
	// WarmupURL is what the warm-up requests get; empty means URLs[0].
	WarmupURL string
	// DNS, as ip:port, is the name server to ask instead of the ones in
	// /etc/resolv.conf.
	DNS string
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// Args is the command line of bench/cmd/airlock-httpclient for o.
func (o Options) Args() []string {
	args := []string{"-mode", o.Mode, "-n", strconv.Itoa(o.Count), "-warmup", strconv.Itoa(o.Warmup)}
	if o.WarmupURL != "" {
		args = append(args, "-warmup-url", o.WarmupURL)
	}
	if o.DNS != "" {
		args = append(args, "-dns", o.DNS)
	}
	if o.Timeout > 0 {
		args = append(args, "-timeout", o.Timeout.String())
	}
	return append(args, o.URLs...)
}

// ParseArgs is the inverse of Args.
func ParseArgs(name string, args []string) (Options, error) {
	var o Options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&o.Mode, "mode", KeepAlive, "keepalive, newconn or bulk")
	fs.IntVar(&o.Count, "n", 100, "timed requests (keepalive, bulk) or rounds (newconn)")
	fs.IntVar(&o.Warmup, "warmup", 1, "untimed requests first")
	fs.StringVar(&o.WarmupURL, "warmup-url", "", "`URL` of the warm-up requests (default: the first URL)")
	fs.StringVar(&o.DNS, "dns", "", "name server `ip:port` to ask instead of /etc/resolv.conf's")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags] URL...\n\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.URLs = fs.Args()
	return o, o.check()
}

func (o Options) check() error {
	switch {
	case o.Mode != KeepAlive && o.Mode != NewConn && o.Mode != Bulk:
		return fmt.Errorf("unknown mode %q", o.Mode)
	case len(o.URLs) == 0:
		return errors.New("no URL")
	case o.Mode != NewConn && len(o.URLs) != 1:
		return fmt.Errorf("%s takes one URL", o.Mode)
	case o.Mode == Bulk && o.Warmup < 1:
		return errors.New("bulk needs a warm-up request to open the connection")
	case o.Count < 0 || o.Warmup < 0:
		return errors.New("negative count")
	}
	return nil
}

// Result is what one run measured. Times are in milliseconds.
type Result struct {
	Mode string `json:"mode"`
	// LatencyMs has one entry per timed request: from sending it to the
	// end of its body. For NewConn that includes the name lookup, the
	// TCP connection and the TLS handshake, which DNSMs, ConnectMs and
	// TLSMs time apart.
	LatencyMs []float64 `json:"latency_ms,omitempty"`
	DNSMs     []float64 `json:"dns_ms,omitempty"`
	ConnectMs []float64 `json:"connect_ms,omitempty"`
	TLSMs     []float64 `json:"tls_ms,omitempty"`
	// ElapsedMs is the wall time of the timed requests together.
	ElapsedMs float64 `json:"elapsed_ms"`
	// Bytes is the body bytes of the timed requests.
	Bytes int64 `json:"bytes"`
	// Conns is how many TCP connections the run opened, warm-up
	// included, and TimedConns how many of them while timing.
	Conns      int `json:"conns"`
	TimedConns int `json:"timed_conns"`
	// Handshakes counts TLS handshakes, and Leaves lists, per server
	// name, the SHA-256 of every distinct leaf certificate they got.
	Handshakes int                 `json:"tls_handshakes"`
	Leaves     map[string][]string `json:"leaves,omitempty"`
	// Proto is the protocol of the last response ("HTTP/1.1").
	Proto string `json:"proto"`
}

// client is the run's state: its transport and what it counted.
type client struct {
	o     Options
	hc    *http.Client
	mu    sync.Mutex
	conns int
	res   *Result
}

// Run runs o and returns what it measured. Any request that fails or
// answers with a status other than 200 ends the run with an error.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	c := &client{o: o, res: &Result{Mode: o.Mode, Leaves: map[string][]string{}}}
	resolver := &net.Resolver{PreferGo: true}
	if o.DNS != "" {
		resolver.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, o.DNS)
		}
	}
	dialer := &net.Dialer{Resolver: resolver, Timeout: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, "tcp4", addr)
			if err == nil {
				c.mu.Lock()
				c.conns++
				c.mu.Unlock()
			}
			return conn, err
		},
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// Called once per handshake, after the usual checks.
			VerifyConnection: c.recordLeaf,
		},
		// A non-nil empty map keeps HTTP/2 out.
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableCompression:  true,
		DisableKeepAlives:   o.Mode == NewConn,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
	}
	defer tr.CloseIdleConnections()
	c.hc = &http.Client{Transport: tr}

	var err error
	switch o.Mode {
	case KeepAlive:
		err = c.keepAlive(ctx)
	case NewConn:
		err = c.newConn(ctx)
	case Bulk:
		err = c.bulk(ctx)
	}
	if err != nil {
		return nil, err
	}
	c.res.Conns = c.conns
	for name := range c.res.Leaves {
		slices.Sort(c.res.Leaves[name])
	}
	return c.res, nil
}

func (c *client) recordLeaf(cs tls.ConnectionState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res.Handshakes++
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	fp := hex.EncodeToString(sum[:])
	name := strings.ToLower(cs.ServerName)
	if !slices.Contains(c.res.Leaves[name], fp) {
		c.res.Leaves[name] = append(c.res.Leaves[name], fp)
	}
	return nil
}

func (c *client) connCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

// get sends one GET of url with the context ctx and reads the body to
// its end into buf's worth of chunks; it returns the body's length.
func (c *client) get(ctx context.Context, url string, buf []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("GET %s: reading the body: %w", url, err)
		}
	}
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("GET %s: %d body bytes of %d", url, n, resp.ContentLength)
	}
	c.res.Proto = resp.Proto
	return n, nil
}

// warmUp sends the untimed requests.
func (c *client) warmUp(ctx context.Context, buf []byte) error {
	url := c.o.WarmupURL
	if url == "" {
		url = c.o.URLs[0]
	}
	for i := 0; i < c.o.Warmup; i++ {
		if _, err := c.get(ctx, url, buf); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) keepAlive(ctx context.Context) error {
	url := c.o.URLs[0]
	buf := make([]byte, 32<<10)
	if err := c.warmUp(ctx, buf); err != nil {
		return err
	}
	conns0 := c.connCount()
	lat := make([]float64, 0, c.o.Count)
	start := time.Now()
	for i := 0; i < c.o.Count; i++ {
		t0 := time.Now()
		n, err := c.get(ctx, url, buf)
		if err != nil {
			return err
		}
		lat = append(lat, msSince(t0))
		c.res.Bytes += n
	}
	c.res.ElapsedMs = msSince(start)
	c.res.LatencyMs = lat
	c.res.TimedConns = c.connCount() - conns0
	return nil
}

func (c *client) newConn(ctx context.Context) error {
	buf := make([]byte, 32<<10)
	if err := c.warmUp(ctx, buf); err != nil {
		return err
	}
	conns0 := c.connCount()
	n := c.o.Count * len(c.o.URLs)
	c.res.LatencyMs = make([]float64, 0, n)
	start := time.Now()
	for i := 0; i < c.o.Count; i++ {
		for _, url := range c.o.URLs {
			var dnsStart, dnsDone, connStart, connDone, tlsStart, tlsDone time.Time
			trace := &httptrace.ClientTrace{
				DNSStart:          func(httptrace.DNSStartInfo) { dnsStart = time.Now() },
				DNSDone:           func(httptrace.DNSDoneInfo) { dnsDone = time.Now() },
				ConnectStart:      func(string, string) { connStart = time.Now() },
				ConnectDone:       func(string, string, error) { connDone = time.Now() },
				TLSHandshakeStart: func() { tlsStart = time.Now() },
				TLSHandshakeDone:  func(tls.ConnectionState, error) { tlsDone = time.Now() },
			}
			t0 := time.Now()
			k, err := c.get(httptrace.WithClientTrace(ctx, trace), url, buf)
			if err != nil {
				return err
			}
			c.res.LatencyMs = append(c.res.LatencyMs, msSince(t0))
			c.res.Bytes += k
			c.res.DNSMs = append(c.res.DNSMs, ms(dnsDone.Sub(dnsStart)))
			c.res.ConnectMs = append(c.res.ConnectMs, ms(connDone.Sub(connStart)))
			if !tlsStart.IsZero() {
				c.res.TLSMs = append(c.res.TLSMs, ms(tlsDone.Sub(tlsStart)))
			}
		}
	}
	c.res.ElapsedMs = msSince(start)
	c.res.TimedConns = c.connCount() - conns0
	return nil
}

func (c *client) bulk(ctx context.Context) error {
	buf := make([]byte, 64<<10)
	if err := c.warmUp(ctx, buf); err != nil {
		return err
	}
	conns0 := c.connCount()
	start := time.Now()
	for i := 0; i < c.o.Count; i++ {
		t0 := time.Now()
		n, err := c.get(ctx, c.o.URLs[0], buf)
		if err != nil {
			return err
		}
		c.res.LatencyMs = append(c.res.LatencyMs, msSince(t0))
		c.res.Bytes += n
	}
	c.res.ElapsedMs = msSince(start)
	c.res.TimedConns = c.connCount() - conns0
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msSince(t time.Time) float64 { return ms(time.Since(t)) }
