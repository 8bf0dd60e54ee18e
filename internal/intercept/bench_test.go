package intercept

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchUpstream answers /small with two bytes, /bulk with bulkSize
// bytes, and reads whatever is posted.
const bulkSize = 16 << 20

var bulkData = bytes.Repeat([]byte("0123456789abcdef"), bulkSize/16)

func benchUpstream(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/bulk":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(bulkData)
	default:
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}
}

// benchClients returns a client that goes through the interceptor and
// one that goes straight to the upstream server, both keeping
// connections alive.
func benchClients(b *testing.B, h *harness, h2 bool) (intercepted, direct *http.Client) {
	intercepted = h.client(h2)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.upCA.CertPEM())
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.upstream.Listener.Addr().String())
		},
		TLSClientConfig:    &tls.Config{RootCAs: pool, ServerName: apiHost},
		ForceAttemptHTTP2:  h2,
		DisableCompression: true,
	}
	b.Cleanup(tr.CloseIdleConnections)
	return intercepted, &http.Client{Transport: tr}
}

// BenchmarkGet measures keep-alive GETs, one at a time, through the
// interceptor and directly: the difference is the interceptor's added
// latency. It reports the median.
func BenchmarkGet(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		name := "h1"
		if h2 {
			name = "h2"
		}
		for _, mode := range []string{"direct", "intercepted"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				h := newHarness(b, harnessConfig{handler: http.HandlerFunc(benchUpstream), upstreamH2: h2, dropEvents: true, policy: secretConfig()})
				ic, direct := benchClients(b, h, h2)
				c := direct
				if mode == "intercepted" {
					c = ic
				}
				get := func() {
					resp, err := c.Get(h.url("/small"))
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				get() // connect
				var took []time.Duration
				for b.Loop() {
					start := time.Now()
					get()
					took = append(took, time.Since(start))
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			})
		}
	}
}

// BenchmarkBulk measures a large download and a large upload (rewritten
// for secrets as it streams) through the interceptor and directly.
func BenchmarkBulk(b *testing.B) {
	upload := strings.Repeat("x", bulkSize)
	for _, plain := range []bool{false, true} {
		for _, dir := range []string{"download", "upload"} {
			for _, mode := range []string{"direct", "intercepted"} {
				proto := "tls"
				if plain {
					proto = "plain"
				}
				b.Run(proto+"/"+dir+"/"+mode, func(b *testing.B) {
					h := newHarness(b, harnessConfig{handler: http.HandlerFunc(benchUpstream), dropEvents: true, policy: secretConfig(), plain: plain})
					ic, direct := benchClients(b, h, false)
					c := direct
					if mode == "intercepted" {
						c = ic
					}
					b.SetBytes(bulkSize)
					for b.Loop() {
						var resp *http.Response
						var err error
						if dir == "download" {
							resp, err = c.Get(h.url("/bulk"))
						} else {
							resp, err = c.Post(h.url("/upload"), "application/octet-stream", strings.NewReader(upload))
						}
						if err != nil {
							b.Fatal(err)
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							b.Fatal(resp.Status)
						}
					}
				})
			}
		}
	}
}
