package testnet

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// maxStored bounds what /store keeps per key, and the number of keys.
const (
	maxStored     = 1 << 20
	maxStoredKeys = 1024
)

// store serves /store/{key}: a paste service, or an object store. PUT or
// POST keeps the body under key (per site), and in the request's record; GET gives it back as a real
// object store does, with Range, If-Range and HEAD (http.ServeContent),
// and with these transformations that a store may apply to what it
// keeps:
//
//	?offset=N&len=M   M bytes from N, as a whole 200 response (pieces that
//	                  the application cuts, not HTTP ranges)
//	?reverse=1        the bytes in reverse order
//	?partial=A-B      bytes A to B as 206 Partial Content with
//	                  Content-Range, whatever the request asked
func (w *World) store(s *site) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		key := s.name + "/" + r.PathValue("key")
		switch r.Method {
		case http.MethodPut, http.MethodPost:
			body, err := io.ReadAll(io.LimitReader(r.Body, maxStored+1))
			if err != nil || len(body) > maxStored {
				http.Error(rw, "the body is too long, or did not arrive", http.StatusRequestEntityTooLarge)
				return
			}
			w.mu.Lock()
			if len(w.stored) >= maxStoredKeys {
				w.mu.Unlock()
				http.Error(rw, "the store is full", http.StatusInsufficientStorage)
				return
			}
			w.stored[key] = body
			if req, ok := r.Context().Value(requestKey{}).(*Request); ok {
				req.Body = body
			}
			w.mu.Unlock()
			rw.WriteHeader(http.StatusCreated)
			fmt.Fprintf(rw, "stored %d bytes\n", len(body))
			return
		case http.MethodGet, http.MethodHead:
		default:
			http.Error(rw, "GET, HEAD, PUT or POST", http.StatusMethodNotAllowed)
			return
		}
		w.mu.Lock()
		data, ok := w.stored[key]
		w.mu.Unlock()
		if !ok {
			http.NotFound(rw, r)
			return
		}
		q := r.URL.Query()
		if q.Get("reverse") == "1" {
			data = slices.Clone(data)
			slices.Reverse(data)
		}
		if q.Has("offset") {
			off, n := intParam(r, "offset", 0), intParam(r, "len", 1)
			off = min(off, int64(len(data)))
			data = data[off:min(off+n, int64(len(data)))]
		}
		if p := q.Get("partial"); p != "" {
			var a, b int
			if _, err := fmt.Sscanf(p, "%d-%d", &a, &b); err != nil || a < 0 || b < a || b >= len(data) {
				http.Error(rw, "partial=A-B within the object", http.StatusBadRequest)
				return
			}
			rw.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, len(data)))
			rw.Header().Set("Content-Length", strconv.Itoa(b-a+1))
			rw.WriteHeader(http.StatusPartialContent)
			_, _ = rw.Write(data[a : b+1])
			return
		}
		rw.Header().Set("Content-Type", "application/octet-stream")
		rw.Header().Set("ETag", fmt.Sprintf(`"%x"`, len(data)))
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(data))
	}
}

// deflated serves /deflate?raw=0|1&echo=TEXT: TEXT (or "deflated body\n")
// compressed with Content-Encoding: deflate, whatever the client asked
// for, wrapped in zlib (RFC 1950, what the standard says) or, with
// raw=1, bare (RFC 1951, what some servers send).
func deflated(rw http.ResponseWriter, r *http.Request) {
	text := r.URL.Query().Get("echo")
	if text == "" {
		text = "deflated body\n"
	}
	var b bytes.Buffer
	if intParam(r, "raw", 0) == 1 {
		zw, _ := flate.NewWriter(&b, flate.BestCompression)
		_, _ = io.WriteString(zw, text)
		_ = zw.Close()
	} else {
		zw := zlib.NewWriter(&b)
		_, _ = io.WriteString(zw, text)
		_ = zw.Close()
	}
	rw.Header().Set("Content-Type", "text/plain")
	rw.Header().Set("Content-Encoding", "deflate")
	rw.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	_, _ = rw.Write(b.Bytes())
}

// slow serves /slow: it reads the request and sends nothing, not even a
// header, until the client goes or the World stops.
func (w *World) slow(rw http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-w.closing:
	}
}
