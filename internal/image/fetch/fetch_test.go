package fetch_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/fetch"
	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// server is a loopback HTTP server of one file whose behaviour a test
// sets per request, and that records the requests it gets.
type server struct {
	*httptest.Server
	content []byte

	mu     sync.Mutex
	ranges []string // each request's Range header ("" for none)
	// handle answers request n (from 0); nil serves the file with
	// Range support.
	handle func(n int, w http.ResponseWriter, r *http.Request) bool
}

func newServer(t *testing.T, content []byte) *server {
	s := &server{content: content}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		n := len(s.ranges)
		s.ranges = append(s.ranges, r.Header.Get("Range"))
		h := s.handle
		s.mu.Unlock()
		if h != nil && h(n, w, r) {
			return
		}
		http.ServeContent(w, r, "blob", time.Unix(1700000000, 0), bytes.NewReader(s.content))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...)
}

// dropAfter sends the whole file's headers and n of its bytes, then
// drops the connection.
func dropAfter(w http.ResponseWriter, content []byte, n int) {
	w.Header().Set("Content-Length", strconv.Itoa(len(content)))
	w.WriteHeader(http.StatusOK)
	w.Write(content[:n])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func newCache(t *testing.T) *store.Cache {
	c, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fastFetcher() *fetch.Fetcher {
	return &fetch.Fetcher{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Stall: 2 * time.Second}
}

// get fetches want and checks that the blob is there with content.
func get(t *testing.T, f *fetch.Fetcher, c *store.Cache, want fetch.Want, content []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	file, err := f.Blob(ctx, c, want, nil)
	if err != nil {
		t.Fatalf("Blob: %v", err)
	}
	defer file.Close()
	got, err := io.ReadAll(file)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the opened blob has %d bytes (%v), want the %d served", len(got), err, len(content))
	}
	p, _ := c.BlobPath(want.Digest())
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("the cached blob is not the file: %v", err)
	}
	if _, err := os.Stat(p + ".part"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a .part file was left: %v", err)
	}
}

// A connection dropped half-way is resumed with a Range request for
// the rest, and the file is whole.
func TestResumeAfterDrop(t *testing.T) {
	content := randomBytes(t, 3<<20)
	s := newServer(t, content)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 0 {
			dropAfter(w, content, 1<<20+17)
			return true
		}
		return false
	}
	c := newCache(t)
	var reports []int64
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	file, err := fastFetcher().Blob(ctx, c, fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}, func(done, total int64) {
		mu.Lock()
		reports = append(reports, done)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(file)
	file.Close()
	if !bytes.Equal(got, content) {
		t.Fatal("the resumed file differs")
	}
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0] != "" || reqs[1] != "bytes=1048593-" {
		t.Fatalf("requests' ranges %q, want a whole request and then bytes=1048593-", reqs)
	}
	if reports[len(reports)-1] != int64(len(content)) {
		t.Errorf("the last progress report is %d, want %d", reports[len(reports)-1], len(content))
	}
}

// A file whose checksum is not the one asked for is refused with an
// error naming the URL, what was expected and what came, and nothing
// of it is kept.
func TestChecksumMismatch(t *testing.T) {
	content := randomBytes(t, 100<<10)
	s := newServer(t, content)
	c := newCache(t)
	wrong := sum([]byte("something else"))
	want := fetch.Want{URL: s.URL + "/blob", SHA256: wrong, Size: int64(len(content))}
	_, err := fastFetcher().Blob(context.Background(), c, want, nil)
	var me *fetch.MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Blob: %v, want a MismatchError", err)
	}
	for _, s := range []string{s.URL + "/blob", wrong, sum(content), "sha256"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error %q does not say %q", err, s)
		}
	}
	p, _ := c.BlobPath(want.Digest())
	for _, f := range []string{p, p + ".part"} {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was kept: %v", f, err)
		}
	}
	// A file of the wrong size is refused as early as the server says so.
	_, err = fastFetcher().Blob(context.Background(), c, fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content)) - 1}, nil)
	if !errors.As(err, &me) || me.What != "size" {
		t.Fatalf("Blob of a shorter size: %v, want a size mismatch", err)
	}
	if _, err := os.Stat(p + ".part"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a .part was kept: %v", err)
	}
}

// Two 503s are retried, and the third answer brings the file.
func TestRetry503(t *testing.T) {
	content := randomBytes(t, 64<<10)
	s := newServer(t, content)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n < 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	get(t, fastFetcher(), newCache(t), fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}, content)
	if n := len(s.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

// Failures that never pass end after the bounded attempts, with the
// server's answer in the error.
func TestRetryBounded(t *testing.T) {
	content := randomBytes(t, 1024)
	s := newServer(t, content)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return true
	}
	f := fastFetcher()
	f.Attempts = 3
	_, err := f.Blob(context.Background(), newCache(t), fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: 1024}, nil)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("Blob: %v, want the 503 and the URL", err)
	}
	if n := len(s.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

// A 404 is final: one request, and the error names the URL and status.
func TestNotFoundIsFinal(t *testing.T) {
	s := newServer(t, nil)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		http.NotFound(w, r)
		return true
	}
	_, err := fastFetcher().Blob(context.Background(), newCache(t), fetch.Want{URL: s.URL + "/gone", SHA256: sum(nil), Size: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), s.URL+"/gone") {
		t.Fatalf("Blob: %v", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// A server that ignores Range sends the whole file again: the download
// starts over cleanly instead of appending it.
func TestServerIgnoresRange(t *testing.T) {
	content := randomBytes(t, 2<<20)
	s := newServer(t, content)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 0 {
			dropAfter(w, content, 700<<10)
			return true
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		w.Write(content)
		return true
	}
	get(t, fastFetcher(), newCache(t), fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}, content)
	if reqs := s.requests(); len(reqs) != 2 || reqs[1] != "bytes=716800-" {
		t.Fatalf("requests' ranges %q, want the second to ask for the rest", reqs)
	}
}

// A server that stops sending without closing is given up on after the
// stall timeout, and the download resumes.
func TestStallResumes(t *testing.T) {
	content := randomBytes(t, 256<<10)
	s := newServer(t, content)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content[:1000])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return true
		}
		return false
	}
	f := fastFetcher()
	f.Stall = 300 * time.Millisecond
	get(t, f, newCache(t), fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}, content)
	if reqs := s.requests(); len(reqs) != 2 || reqs[1] != "bytes=1000-" {
		t.Fatalf("requests' ranges %q", reqs)
	}
}

// A damaged blob in the cache is found by its hash and fetched again.
func TestDamagedBlobFetchedAgain(t *testing.T) {
	content := randomBytes(t, 64<<10)
	s := newServer(t, content)
	c := newCache(t)
	want := fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}
	get(t, fastFetcher(), c, want, content)
	get(t, fastFetcher(), c, want, content)
	if n := len(s.requests()); n != 1 {
		t.Fatalf("%d requests for a blob already had, want 1", n)
	}
	p, _ := c.BlobPath(want.Digest())
	damaged := append([]byte(nil), content...)
	damaged[100] ^= 1
	if err := os.WriteFile(p, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	get(t, fastFetcher(), c, want, content)
	if n := len(s.requests()); n != 2 {
		t.Fatalf("%d requests, want the damaged blob fetched again", n)
	}
}

// What an earlier download left in .part is resumed; when it was of
// another file (the check fails), the file is fetched once more whole.
func TestStalePartStartsOver(t *testing.T) {
	content := randomBytes(t, 64<<10)
	s := newServer(t, content)
	c := newCache(t)
	want := fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}
	p, _ := c.BlobPath(want.Digest())
	if err := os.WriteFile(p+".part", randomBytes(t, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	get(t, fastFetcher(), c, want, content)
	if reqs := s.requests(); len(reqs) != 2 || reqs[0] != "bytes=5000-" || reqs[1] != "" {
		t.Fatalf("requests' ranges %q, want a resume and then the whole file", reqs)
	}
}

// Two fetches of one blob at once download it once; both get it.
func TestConcurrentFetchesDownloadOnce(t *testing.T) {
	content := randomBytes(t, 512<<10)
	s := newServer(t, content)
	var inFlight atomic.Int32
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		time.Sleep(300 * time.Millisecond) // both callers are waiting by now
		return false
	}
	c1, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := store.Open(c1.Dir())
	if err != nil {
		t.Fatal(err)
	}
	want := fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}
	var wg sync.WaitGroup
	for _, c := range []*store.Cache{c1, c2} {
		wg.Go(func() { get(t, fastFetcher(), c, want, content) })
	}
	wg.Wait()
	if n := len(s.requests()); n != 1 {
		t.Fatalf("%d downloads, want 1", n)
	}
}

// A manifest from a port where nothing listens: the error names the
// URL and the cause.
func TestGetUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	f := fastFetcher()
	f.Attempts = 2
	_, err = f.Get(context.Background(), "http://"+addr+"/manifest.json", 1<<20)
	if err == nil || !strings.Contains(err.Error(), "http://"+addr+"/manifest.json") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Get: %v, want the URL and the cause", err)
	}
}

// Get refuses a file larger than its limit, whatever the server says of
// its length.
func TestGetBounded(t *testing.T) {
	s := newServer(t, nil)
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		w.(http.Flusher).Flush() // chunked: no length said
		w.Write(bytes.Repeat([]byte("x"), 5000))
		return true
	}
	_, err := fastFetcher().Get(context.Background(), s.URL+"/m", 4096)
	if err == nil || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("Get: %v, want the limit refused", err)
	}
	if b, err := fastFetcher().Get(context.Background(), s.URL+"/m", 5000); err != nil || len(b) != 5000 {
		t.Fatalf("Get: %d bytes, %v", len(b), err)
	}
}

// A context that ends stops a download and keeps what was had for the
// next one to resume.
func TestCancelKeepsPart(t *testing.T) {
	content := randomBytes(t, 256<<10)
	s := newServer(t, content)
	ctx, cancel := context.WithCancel(context.Background())
	s.handle = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content[:4000])
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
			cancel()
			<-r.Context().Done()
			return true
		}
		return false
	}
	c := newCache(t)
	want := fetch.Want{URL: s.URL + "/blob", SHA256: sum(content), Size: int64(len(content))}
	if _, err := fastFetcher().Blob(ctx, c, want, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Blob: %v, want it canceled", err)
	}
	p, _ := c.BlobPath(want.Digest())
	if fi, err := os.Stat(p + ".part"); err != nil || fi.Size() != 4000 {
		t.Fatalf(".part: %v, want the 4000 bytes had", err)
	}
	get(t, fastFetcher(), c, want, content)
	if reqs := s.requests(); reqs[len(reqs)-1] != "bytes=4000-" {
		t.Fatalf("requests' ranges %q, want the last to resume at 4000", reqs)
	}
}
