package rpc

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/airlock-sandbox/airlock/api"
)

// nullID is the id of responses to requests whose id is unknown.
func nullID() json.RawMessage { return json.RawMessage("null") }

// lineWriter writes whole lines to the client, one at a time, so that
// concurrent responses never interleave. Its first write error is kept
// and returned by every later write, and reported to onFail once.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	err    error
	onFail func(error)
}

// write writes parts as one line; the last part must end with "\n".
func (lw *lineWriter) write(parts ...[]byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return lw.err
	}
	for _, p := range parts {
		if _, err := lw.w.Write(p); err != nil {
			lw.err = fmt.Errorf("write to client: %w", err)
			if lw.onFail != nil {
				lw.onFail(lw.err)
			}
			return lw.err
		}
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

// reply sends a result for the request with this id; nothing for a
// notification (nil id).
func (lw *lineWriter) reply(id json.RawMessage, result any) error {
	if id == nil {
		return nil
	}
	b, err := json.Marshal(result)
	if err != nil {
		return lw.replyError(id, &api.Error{Code: api.CodeInternal, Message: "encode result: " + err.Error() + ": please report this bug"})
	}
	return lw.write([]byte(prefixResult), b, []byte(infixID), id, []byte(suffixLine))
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
	return lw.write([]byte(prefixError), b, []byte(infixID), id, []byte(suffixLine))
}

// notify sends a notification.
func (lw *lineWriter) notify(method string, params any) error {
	b, err := json.Marshal(api.Notification{JSONRPC: "2.0", Method: method, Params: params})
	if err != nil {
		return fmt.Errorf("encode %s notification: %w", method, err)
	}
	return lw.write(b, []byte("\n"))
}
