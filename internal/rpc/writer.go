package rpc

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// nullID is the id of responses to requests whose id is unknown.
func nullID() json.RawMessage { return json.RawMessage("null") }

// lineWriter writes whole lines to the client, one at a time, so that
// concurrent responses never interleave. Each line goes out in one Write,
// so that a client never wakes up for part of a line. Its first write
// error is kept and returned by every later write, and reported to onFail
// once.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	err    error
	onFail func(error)
}

// linePool recycles the buffers of ordinary lines.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledLine is the largest buffer kept for reuse.
const maxPooledLine = 64 << 10

func getLine() *[]byte { return linePool.Get().(*[]byte) }

func putLine(b *[]byte) {
	if cap(*b) <= maxPooledLine {
		*b = (*b)[:0]
		linePool.Put(b)
	}
}

// writeLine writes line, which ends with "\n", in one Write.
func (lw *lineWriter) writeLine(line []byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return lw.err
	}
	if _, err := lw.w.Write(line); err != nil {
		lw.err = fmt.Errorf("write to client: %w", err)
		if lw.onFail != nil {
			lw.onFail(lw.err)
		}
		return lw.err
	}
	return nil
}

// The pieces of a response line around its result or error and its id.
const (
	prefixResult = `{"jsonrpc":"2.0","result":`
	prefixError  = `{"jsonrpc":"2.0","error":`
	infixID      = `,"id":`
	suffixLine   = "}\n"
)

// blobResult is a result with large base64 fields, which go into the
// response line without encoding/json scanning them: v must encode each
// blob's member as "" (see jsonblob.AppendMarshal), and the line carries
// the base64 of the blob there instead. With recycle, nothing else refers
// to the blobs: their memory is kept for reuse once encoded
// (jsonblob.Recycle).
type blobResult struct {
	v       any
	blobs   []jsonblob.Blob
	recycle bool
}

// reply sends a result for the request with this id; nothing for a
// notification (nil id).
func (lw *lineWriter) reply(id json.RawMessage, result any) error {
	if id == nil {
		return nil
	}
	if r, ok := result.(*blobResult); ok {
		// The line is written into memory kept from an earlier large
		// line if there is some, and kept in turn.
		n := len(prefixResult) + len(infixID) + len(id) + len(suffixLine) + 256
		for _, b := range r.blobs {
			n += base64.StdEncoding.EncodedLen(len(b.Data))
		}
		line := jsonblob.Buffer(n)
		line = append(line, prefixResult...)
		line, err := jsonblob.AppendMarshalBlobs(line, r.v, r.blobs...)
		if r.recycle {
			for _, b := range r.blobs {
				jsonblob.Recycle(b.Data)
			}
		}
		if err != nil {
			return lw.replyError(id, &api.Error{Code: api.CodeInternal, Message: "encode result: " + err.Error() + ": please report this bug"})
		}
		line = appendEnd(line, id)
		err = lw.writeLine(line)
		jsonblob.Recycle(line)
		return err
	}
	b, err := json.Marshal(result)
	if err != nil {
		return lw.replyError(id, &api.Error{Code: api.CodeInternal, Message: "encode result: " + err.Error() + ": please report this bug"})
	}
	return lw.send(prefixResult, b, id)
}

// replyError sends an error for the request with this id; nothing for a
// notification.
func (lw *lineWriter) replyError(id json.RawMessage, e *api.Error) error {
	if id == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		b, _ = json.Marshal(&api.Error{Code: e.Code, Message: e.Message})
	}
	return lw.send(prefixError, b, id)
}

// send writes prefix, the encoded result or error, and the id as a line.
func (lw *lineWriter) send(prefix string, b []byte, id json.RawMessage) error {
	buf := getLine()
	defer putLine(buf)
	line := append(append(*buf, prefix...), b...)
	*buf = appendEnd(line, id)
	return lw.writeLine(*buf)
}

// appendEnd ends a response line with its id.
func appendEnd(line []byte, id json.RawMessage) []byte {
	line = append(line, infixID...)
	line = append(line, id...)
	return append(line, suffixLine...)
}

// notify sends a notification.
func (lw *lineWriter) notify(method string, params any) error {
	b, err := json.Marshal(api.Notification{JSONRPC: "2.0", Method: method, Params: params})
	if err != nil {
		return fmt.Errorf("encode %s notification: %w", method, err)
	}
	buf := getLine()
	defer putLine(buf)
	*buf = append(append(*buf, b...), '\n')
	return lw.writeLine(*buf)
}
