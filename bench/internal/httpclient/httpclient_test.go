package httpclient

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(make([]byte, n))
	})
	return mux
}

func run(t *testing.T, o Options) *Result {
	t.Helper()
	o.Timeout = time.Minute
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("%s: %v", o.Mode, err)
	}
	return res
}

func TestModes(t *testing.T) {
	srv := httptest.NewServer(handler())
	defer srv.Close()

	ka := run(t, Options{Mode: KeepAlive, URLs: []string{srv.URL + "/"}, Count: 20, Warmup: 3})
	if len(ka.LatencyMs) != 20 || ka.Conns != 1 || ka.TimedConns != 0 || ka.Bytes != 20*6 || ka.Proto != "HTTP/1.1" {
		t.Errorf("keepalive: %d samples, %d conns (%d timed), %d bytes, %s", len(ka.LatencyMs), ka.Conns, ka.TimedConns, ka.Bytes, ka.Proto)
	}

	nc := run(t, Options{Mode: NewConn, URLs: []string{srv.URL + "/", srv.URL + "/"}, Count: 3, Warmup: 1})
	if len(nc.LatencyMs) != 6 || nc.Conns != 7 || nc.TimedConns != 6 || len(nc.ConnectMs) != 6 || len(nc.TLSMs) != 0 {
		t.Errorf("newconn: %d samples, %d conns (%d timed), %d connects, %d handshakes", len(nc.LatencyMs), nc.Conns, nc.TimedConns, len(nc.ConnectMs), len(nc.TLSMs))
	}

	bulk := run(t, Options{Mode: Bulk, URLs: []string{srv.URL + "/bytes?n=3000000"}, WarmupURL: srv.URL + "/", Count: 2, Warmup: 1})
	if bulk.Bytes != 6000000 || len(bulk.LatencyMs) != 2 || bulk.Conns != 1 || bulk.TimedConns != 0 {
		t.Errorf("bulk: %d bytes, %d samples, %d conns (%d timed)", bulk.Bytes, len(bulk.LatencyMs), bulk.Conns, bulk.TimedConns)
	}

	if _, err := Run(context.Background(), Options{Mode: KeepAlive, URLs: []string{srv.URL + "/missing"}, Count: 1}); err == nil {
		t.Error("a 404 is no error")
	}
}

// TestTLS checks the handshakes and the leaves the client records, with
// the system trust store that SSL_CERT_FILE points at, as in a sandbox.
// It must be the only test that verifies a certificate: the store is read
// once per process.
func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(handler())
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)

	nc := run(t, Options{Mode: NewConn, URLs: []string{srv.URL + "/"}, Count: 4, Warmup: 1})
	if nc.Handshakes != 5 || len(nc.TLSMs) != 4 {
		t.Errorf("newconn: %d handshakes, %d timed", nc.Handshakes, len(nc.TLSMs))
	}
	// httptest's certificate names example.com and 127.0.0.1; the client
	// sent no server name for an address.
	if len(nc.Leaves) != 1 || len(nc.Leaves[""]) != 1 {
		t.Errorf("leaves %v, want one", nc.Leaves)
	}
	ka := run(t, Options{Mode: KeepAlive, URLs: []string{srv.URL + "/"}, Count: 5, Warmup: 1})
	if ka.Handshakes != 1 || ka.Proto != "HTTP/1.1" {
		t.Errorf("keepalive: %d handshakes, %s", ka.Handshakes, ka.Proto)
	}
}

func TestArgs(t *testing.T) {
	o := Options{Mode: Bulk, URLs: []string{"https://a.example/bytes?n=1"}, WarmupURL: "https://a.example/", Count: 2, Warmup: 1, DNS: "192.0.2.53:53", Timeout: time.Minute}
	got, err := ParseArgs("test", o.Args())
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != o.Mode || !slices.Equal(got.URLs, o.URLs) || got.WarmupURL != o.WarmupURL || got.Count != o.Count ||
		got.Warmup != o.Warmup || got.DNS != o.DNS || got.Timeout != o.Timeout {
		t.Errorf("ParseArgs(Args()) = %+v, want %+v", got, o)
	}
	for _, args := range [][]string{
		{"-mode", "nope", "http://x/"},
		{"-mode", "keepalive"},
		{"-mode", "bulk", "-warmup", "0", "http://x/"},
		{"-mode", "keepalive", "http://x/", "http://y/"},
	} {
		if _, err := ParseArgs("test", args); err == nil {
			t.Errorf("ParseArgs(%q) took it", args)
		}
	}
}
