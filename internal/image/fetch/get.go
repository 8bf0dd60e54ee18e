package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
)

// Get returns the content of a small file named by an http, https or
// file URL, of at most limit bytes, retrying transient failures as Blob
// does. It is for what names the blobs (a manifest), which no checksum
// covers.
func (f *Fetcher) Get(ctx context.Context, rawURL string, limit int64) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		return readLimited(u.Path, limit)
	case "http", "https":
	default:
		return nil, fmt.Errorf("get %s: the scheme %q is not one airlock downloads from (http, https, file)", rawURL, u.Scheme)
	}
	failures := 0
	for {
		b, err := f.getOnce(ctx, u, limit)
		var re *retryable
		if !errors.As(err, &re) {
			return b, err
		}
		failures++
		if failures >= orDefault(f.Attempts, defaultAttempts) {
			return nil, fmt.Errorf("get %s: %w (gave up after %d attempts)", rawURL, re.err, failures)
		}
		wait := backoff(f, failures, re.after)
		f.log().Info("get failed; retrying", "url", rawURL, "err", re.err, "wait", wait)
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("get %s: %w", rawURL, err)
		}
	}
}

func (f *Fetcher) getOnce(ctx context.Context, u *url.URL, limit int64) ([]byte, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", u, err)
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return nil, classify(u.String(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(u.String(), resp)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("get %s: %d bytes, more than the %d a manifest may have", u, resp.ContentLength, limit)
	}
	stall := orDefault(f.Stall, defaultStall)
	w := newWatchdog(stall, func() { cancel(fmt.Errorf("nothing received for %v", stall)) })
	defer w.stop()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("get %s: %w", u, ctx.Err())
		}
		if cause := context.Cause(actx); cause != nil {
			err = cause
		}
		return nil, &retryable{err: fmt.Errorf("get %s: %w", u, err)}
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("get %s: more than the %d bytes a manifest may have", u, limit)
	}
	return b, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: more than the %d bytes a manifest may have", path, limit)
	}
	return b, nil
}
