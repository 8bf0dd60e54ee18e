// Package fetch gets files named by URL into airlock's image cache: a
// download resumes where it stopped (HTTP Range), transient failures are
// retried with exponential backoff, and what arrives is checked against
// the sha256 and size it was asked for before anyone uses it. A blob
// that fails the check is never kept.
package fetch

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Blobs is where verified blobs are kept: store.Cache is one.
type Blobs interface {
	// BlobPath is where the blob with digest ("sha256:<hex>") is kept.
	BlobPath(digest string) (string, error)
	// Lock takes the cross-process lock for digest's download.
	Lock(ctx context.Context, digest string) (unlock func(), err error)
}

// Want is a file to get: where from, and what it must be.
type Want struct {
	// URL is an http, https or file URL.
	URL string
	// SHA256 is the file's sha256 as 64 lower-case hex digits.
	SHA256 string
	// Size is the file's length in bytes.
	Size int64
}

// Digest is w's digest as the cache names blobs.
func (w Want) Digest() string { return "sha256:" + w.SHA256 }

// MismatchError is a file that is not what it was meant to be.
type MismatchError struct {
	URL       string
	What      string // "sha256" or "size"
	Want, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s is not the file it should be: its %s is %s, expected %s (the mirror or its manifest is damaged, or the file changed after the manifest was written; nothing was kept)", e.URL, e.What, e.Got, e.Want)
}

// Fetcher gets files. The zero value is usable.
type Fetcher struct {
	// Client makes the HTTP requests; nil means one with sensible
	// timeouts that honours the proxy environment variables.
	Client *http.Client
	// Attempts bounds the tries in a row that make no progress
	// (default 5).
	Attempts int
	// Backoff is the wait after the first failure, doubled after each
	// one up to MaxBackoff (defaults 250ms and 8s), with jitter.
	Backoff, MaxBackoff time.Duration
	// Stall ends an attempt that receives nothing for this long
	// (default 30s).
	Stall time.Duration
	// Log receives a line for each retry; nil means slog.Default().
	Log *slog.Logger
}

const (
	defaultAttempts   = 5
	defaultBackoff    = 250 * time.Millisecond
	defaultMaxBackoff = 8 * time.Second
	defaultStall      = 30 * time.Second
	// maxTotalAttempts ends a download that keeps moving a little and
	// then failing, however much progress each attempt makes.
	maxTotalAttempts = 100
	// maxRetryAfter bounds how long a server's Retry-After may make us
	// wait.
	maxRetryAfter = 60 * time.Second
)

func (f *Fetcher) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}

func (f *Fetcher) log() *slog.Logger {
	if f.Log != nil {
		return f.Log
	}
	return slog.Default()
}

func orDefault[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// Blob returns the blob w names, opened and positioned at its start,
// from blobs when it is there and whole (its sha256 is checked), else
// downloaded into blobs first. One download of a blob runs at a time
// across processes: another caller waits and then finds it there.
// progress, when not nil, is called with the bytes had so far.
func (f *Fetcher) Blob(ctx context.Context, blobs Blobs, w Want, progress func(done, total int64)) (*os.File, error) {
	if err := checkWant(w); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	path, err := blobs.BlobPath(w.Digest())
	if err != nil {
		return nil, err
	}
	unlock, err := blobs.Lock(ctx, w.Digest())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if file, err := verified(path, w); err == nil {
		progress(w.Size, w.Size)
		return file, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		f.log().Warn("a cached blob is damaged; fetching it again", "blob", path, "err", err)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove the damaged blob %s: %w", path, err)
		}
	}
	return f.download(ctx, path, w, progress)
}

func checkWant(w Want) error {
	if len(w.SHA256) != 64 || strings.Trim(w.SHA256, "0123456789abcdef") != "" {
		return fmt.Errorf("fetch %s: %q is not a sha256 (64 lower-case hex digits)", w.URL, w.SHA256)
	}
	if w.Size <= 0 {
		return fmt.Errorf("fetch %s: a size of %d bytes", w.URL, w.Size)
	}
	return nil
}

// verified opens the blob at path and checks its size and sha256.
func verified(path string, w Want) (*os.File, error) {
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != w.Size {
		file.Close()
		return nil, &MismatchError{URL: path, What: "size", Want: strconv.FormatInt(w.Size, 10), Got: sizeOf(fi)}
	}
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		file.Close()
		return nil, fmt.Errorf("read blob %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != w.SHA256 {
		file.Close()
		return nil, &MismatchError{URL: path, What: "sha256", Want: w.SHA256, Got: got}
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		file.Close()
		return nil, err
	}
	return file, nil
}

func sizeOf(fi fs.FileInfo) string {
	if fi == nil {
		return "unknown"
	}
	return strconv.FormatInt(fi.Size(), 10)
}

// download gets w into path.part, resuming what a previous download
// left there, checks it and renames it to path.
func (f *Fetcher) download(ctx context.Context, path string, w Want, progress func(done, total int64)) (*os.File, error) {
	part := path + ".part"
	file, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", w.URL, err)
	}
	ok := false
	defer func() {
		if !ok {
			file.Close()
		}
	}()
	d := &transfer{f: f, w: w, file: file, h: sha256.New(), progress: progress}
	// What an earlier, interrupted download left is resumed; the check
	// at the end tells whether it belonged to this file.
	fi, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", w.URL, err)
	}
	if fi.Size() > 0 && fi.Size() <= w.Size {
		if _, err := io.CopyN(d.h, file, fi.Size()); err != nil {
			return nil, fmt.Errorf("download %s: read what was had: %w", w.URL, err)
		}
		d.off, d.fromDisk = fi.Size(), true
	} else if err := d.restart(); err != nil {
		return nil, err
	}
	if err := d.run(ctx); err != nil {
		var me *MismatchError
		if errors.As(err, &me) || ctx.Err() != nil {
			// Nothing of a file that is not the one asked for is
			// kept; an interrupted one stays to be resumed.
			if ctx.Err() == nil {
				os.Remove(part)
			}
		}
		return nil, err
	}
	if err := os.Rename(part, path); err != nil {
		os.Remove(part)
		return nil, fmt.Errorf("download %s: put it in place: %w", w.URL, err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	ok = true
	return file, nil
}

// transfer is one file's download, over as many attempts as it takes.
type transfer struct {
	f         *Fetcher
	w         Want
	file      *os.File
	h         hash.Hash
	off       int64 // bytes in file and in h
	fromDisk  bool  // the first bytes were left by an earlier download
	validator string
	progress  func(done, total int64)
}

// restart empties the file to start again from its first byte.
func (d *transfer) restart() error {
	if err := d.file.Truncate(0); err != nil {
		return fmt.Errorf("download %s: %w", d.w.URL, err)
	}
	if _, err := d.file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("download %s: %w", d.w.URL, err)
	}
	d.h.Reset()
	d.off, d.fromDisk = 0, false
	return nil
}

// run downloads until the file is whole and checked, or a failure is
// final.
func (d *transfer) run(ctx context.Context) error {
	failures, total := 0, 0
	for {
		if d.off == d.w.Size {
			got := hex.EncodeToString(d.h.Sum(nil))
			if got == d.w.SHA256 {
				d.progress(d.off, d.w.Size)
				return nil
			}
			if d.fromDisk {
				// The bytes an earlier download left were of another
				// file (the mirror changed since): once more, whole.
				d.f.log().Warn("a resumed download does not match its checksum; downloading it whole", "url", d.w.URL)
				if err := d.restart(); err != nil {
					return err
				}
				continue
			}
			return &MismatchError{URL: d.w.URL, What: "sha256", Want: d.w.SHA256, Got: got}
		}
		before := d.off
		err := d.attempt(ctx)
		if err == nil {
			continue
		}
		var re *retryable
		if !errors.As(err, &re) {
			return err
		}
		if d.off > before {
			failures = 0
		}
		failures++
		total++
		if failures >= orDefault(d.f.Attempts, defaultAttempts) || total >= maxTotalAttempts {
			return fmt.Errorf("download %s: %w (gave up after %d attempts)", d.w.URL, re.err, total)
		}
		wait := backoff(d.f, failures, re.after)
		d.f.log().Info("download failed; retrying", "url", d.w.URL, "err", re.err, "have", d.off, "of", d.w.Size, "wait", wait)
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("download %s: %w", d.w.URL, err)
		}
	}
}

// retryable is a failure that another attempt may not meet.
type retryable struct {
	err   error
	after time.Duration // the server's Retry-After, or 0
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

func backoff(f *Fetcher, failures int, after time.Duration) time.Duration {
	base := orDefault(f.Backoff, defaultBackoff)
	ceiling := orDefault(f.MaxBackoff, defaultMaxBackoff)
	wait := base << min(failures-1, 20)
	if wait <= 0 || wait > ceiling {
		wait = ceiling
	}
	// Full jitter in the upper half, so many clients do not come back
	// at once.
	wait = wait/2 + rand.N(wait/2+1)
	if after > wait {
		wait = min(after, maxRetryAfter)
	}
	return wait
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// attempt makes one request and writes what it brings. It returns nil
// when bytes were had to the end of the response, a *retryable when
// another attempt may do better, and any other error when none will.
func (d *transfer) attempt(ctx context.Context) error {
	u, err := url.Parse(d.w.URL)
	if err != nil {
		return fmt.Errorf("download %s: %w", d.w.URL, err)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var body io.ReadCloser
	switch u.Scheme {
	case "file":
		body, err = d.openFile(u)
	case "http", "https":
		body, err = d.openHTTP(actx, u)
	default:
		return fmt.Errorf("download %s: the scheme %q is not one airlock downloads from (http, https, file)", d.w.URL, u.Scheme)
	}
	if err != nil {
		return err
	}
	defer body.Close()
	stall := newWatchdog(orDefault(d.f.Stall, defaultStall), func() {
		cancel(fmt.Errorf("nothing received for %v", orDefault(d.f.Stall, defaultStall)))
	})
	defer stall.stop()
	// One byte more than the file can have tells a server that sends
	// too much.
	r := io.LimitReader(body, d.w.Size-d.off+1)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			stall.kick()
			if d.off+int64(n) > d.w.Size {
				return &MismatchError{URL: d.w.URL, What: "size", Want: strconv.FormatInt(d.w.Size, 10), Got: "more than that"}
			}
			if _, err := d.file.Write(buf[:n]); err != nil {
				return fmt.Errorf("download %s: write %s: %w", d.w.URL, d.file.Name(), err)
			}
			d.h.Write(buf[:n])
			d.off += int64(n)
			d.progress(d.off, d.w.Size)
		}
		if rerr == io.EOF {
			if d.off < d.w.Size {
				if u.Scheme == "file" {
					return &MismatchError{URL: d.w.URL, What: "size", Want: strconv.FormatInt(d.w.Size, 10), Got: strconv.FormatInt(d.off, 10)}
				}
				return &retryable{err: errors.New("the connection ended before the file did")}
			}
			return nil
		}
		if rerr != nil {
			if cause := context.Cause(actx); cause != nil && ctx.Err() == nil {
				return &retryable{err: cause}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("download %s: %w", d.w.URL, ctx.Err())
			}
			return &retryable{err: rerr}
		}
	}
}

// openFile opens a local file at the transfer's offset.
func (d *transfer) openFile(u *url.URL) (io.ReadCloser, error) {
	file, err := os.Open(u.Path)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", d.w.URL, err)
	}
	if _, err := file.Seek(d.off, io.SeekStart); err != nil {
		file.Close()
		return nil, fmt.Errorf("download %s: %w", d.w.URL, err)
	}
	return file, nil
}

// openHTTP sends the request for the rest of the file and returns the
// body of a response that carries it, restarting the file when the
// server sends it whole.
func (d *transfer) openHTTP(ctx context.Context, u *url.URL) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", d.w.URL, err)
	}
	// Byte offsets are of the file itself, never of a compressed
	// rendering of it.
	req.Header.Set("Accept-Encoding", "identity")
	if d.off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", d.off))
		if d.validator != "" {
			req.Header.Set("If-Range", d.validator)
		}
	}
	resp, err := d.f.client().Do(req)
	if err != nil {
		return nil, classify(d.w.URL, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		d.remember(resp)
		if d.off > 0 {
			// The server ignored the range, or the file changed
			// since (If-Range): start again from the first byte.
			d.f.log().Info("the server sent the whole file; starting again", "url", d.w.URL, "had", d.off)
			if err := d.restart(); err != nil {
				resp.Body.Close()
				return nil, err
			}
		}
		if resp.ContentLength >= 0 && resp.ContentLength != d.w.Size {
			resp.Body.Close()
			return nil, &MismatchError{URL: d.w.URL, What: "size", Want: strconv.FormatInt(d.w.Size, 10), Got: strconv.FormatInt(resp.ContentLength, 10)}
		}
		return resp.Body, nil
	case resp.StatusCode == http.StatusPartialContent:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != d.off || (total >= 0 && total != d.w.Size) {
			resp.Body.Close()
			if ok && total >= 0 && total != d.w.Size {
				return nil, &MismatchError{URL: d.w.URL, What: "size", Want: strconv.FormatInt(d.w.Size, 10), Got: strconv.FormatInt(total, 10)}
			}
			// A range other than the one asked for: ask for the
			// whole file next time.
			if err := d.restart(); err != nil {
				return nil, err
			}
			return nil, &retryable{err: fmt.Errorf("the server sent the range %q, not bytes %d-", resp.Header.Get("Content-Range"), d.off)}
		}
		return resp.Body, nil
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		resp.Body.Close()
		// What was had is longer than the server's file: not its
		// beginning. Start again.
		if err := d.restart(); err != nil {
			return nil, err
		}
		return nil, &retryable{err: errors.New("the server refused the range of what was had")}
	default:
		resp.Body.Close()
		return nil, statusError(d.w.URL, resp)
	}
}

// remember keeps the response's validator for If-Range, when it is one
// that names the exact bytes (a strong ETag, or a Last-Modified).
func (d *transfer) remember(resp *http.Response) {
	d.validator = ""
	if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		d.validator = et
	} else if lm := resp.Header.Get("Last-Modified"); lm != "" {
		d.validator = lm
	}
}

// contentRange parses "bytes START-END/TOTAL"; total is -1 for "*".
func contentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	span, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, last, found := strings.Cut(span, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	end, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t <= end {
			return 0, 0, false
		}
		total = t
	}
	return start, total, true
}

// statusError turns a response that carries no file into an error,
// retryable for the statuses that say "later".
func statusError(u string, resp *http.Response) error {
	err := fmt.Errorf("%s answered %s", u, resp.Status)
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryable{err: err, after: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return err
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), maxRetryAfter)
	}
	return 0
}

// classify says whether a failed request is worth another try: a
// network failure may pass; a name that does not exist or a certificate
// that is not trusted will not.
func classify(u string, err error) error {
	err = fmt.Errorf("reach %s: %w", u, err)
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound || errors.As(err, &certErr) ||
		errors.As(err, &unknownCA) || errors.As(err, &hostErr) {
		return err
	}
	return &retryable{err: err}
}

// watchdog calls fire when kick has not been called for d.
type watchdog struct {
	t *time.Timer
	d time.Duration
}

func newWatchdog(d time.Duration, fire func()) *watchdog {
	return &watchdog{t: time.AfterFunc(d, fire), d: d}
}

func (w *watchdog) kick() { w.t.Reset(w.d) }
func (w *watchdog) stop() { w.t.Stop() }
