package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/jsonblob"
)

// maxIDBytes bounds a request id, which is echoed in every response.
const maxIDBytes = 1024

// contentCutMin is the length of line from which the content of a
// write_file request is cut out of the line before it is parsed, so that
// encoding/json parses only the rest. (A variable for the tests.)
var contentCutMin = 256 << 10

// request is a parsed, valid JSON-RPC 2.0 request or notification.
type request struct {
	method string
	params json.RawMessage // nil, or a JSON object
	id     json.RawMessage // nil for a notification
	size   int64           // bytes of the line
	// content is, for a large write_file request, the text of its
	// "content" param, cut out of the line (params hold "content":""
	// instead). It has no escapes: its text is its value. Nil otherwise.
	content []byte
	// line is then the line content is part of: nothing else refers to
	// it, so it can be recycled once content is decoded.
	line []byte
}

// badRequest is a line that is not a valid request, with the id to
// answer it with (null when the id is unknown or itself invalid).
type badRequest struct {
	id  json.RawMessage
	err *api.Error
}

// envelope is a request object's members, undecoded.
type envelope struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	Method  json.RawMessage `json:"method"`
	Params  span            `json:"params"`
	ID      json.RawMessage `json:"id"`
}

// span is a JSON value left where it is in the line being decoded,
// rather than copied as json.RawMessage is: params may be most of a line
// of many megabytes. The line is not reused while its request lives.
type span []byte

func (s *span) UnmarshalJSON(b []byte) error {
	*s = b
	return nil
}

// parseRequest checks one line. It returns nil, nil for a blank line.
//
// A large write_file request is mostly the base64 of its content, which
// encoding/json would go over several times. Its content is cut out of
// the line in one pass first (jsonblob.Cut, which only does so when the
// result is certain to be the same); anything else about the request,
// including whether it is valid at all, is then decided on the rest of
// the line. On any doubt the whole line takes the ordinary path.
func parseRequest(line []byte) (*request, *badRequest) {
	if len(line) >= contentCutMin {
		if rest, raw, ok := jsonblob.Cut(line, "params", "content"); ok {
			if req, bad := parseLine(rest); bad == nil && req != nil && req.method == api.MethodWriteFile {
				req.content, req.line = raw, line
				req.size = int64(len(line))
				return req, nil
			}
		}
	}
	return parseLine(line)
}

// parseLine is parseRequest without the cut.
func parseLine(line []byte) (*request, *badRequest) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return nil, nil
	}
	if !json.Valid(trimmed) {
		msg := "the line is not valid JSON"
		var v json.RawMessage
		var se *json.SyntaxError
		if err := json.Unmarshal(trimmed, &v); errors.As(err, &se) {
			msg = fmt.Sprintf("the line is not valid JSON (%v at byte %d)", se, se.Offset)
		}
		return nil, &badRequest{nullID(), &api.Error{Code: api.CodeParseError, Message: msg + ": send one JSON-RPC 2.0 request object per line"}}
	}
	switch trimmed[0] {
	case '{':
	case '[':
		return nil, &badRequest{nullID(), &api.Error{Code: api.CodeInvalidRequest, Message: "batches are not supported: send one request per line (requests on separate lines run concurrently)"}}
	default:
		return nil, &badRequest{nullID(), &api.Error{Code: api.CodeInvalidRequest, Message: `a request must be a JSON object such as {"jsonrpc":"2.0","method":"info","id":1}`}}
	}
	var env envelope
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return nil, &badRequest{nullID(), &api.Error{Code: api.CodeInvalidRequest, Message: "cannot decode the request object: " + err.Error()}}
	}
	id, idErr := checkID(env.ID)
	if idErr != nil {
		return nil, &badRequest{nullID(), idErr}
	}
	// A request without an id is a notification, but an invalid one
	// still gets an answer (with id null): it was not a notification.
	answerTo := id
	if answerTo == nil {
		answerTo = nullID()
	}
	if !bytes.Equal(env.JSONRPC, []byte(`"2.0"`)) {
		return nil, &badRequest{answerTo, &api.Error{Code: api.CodeInvalidRequest, Message: `"jsonrpc" must be "2.0": this server speaks JSON-RPC 2.0`}}
	}
	var method string
	if env.Method == nil || json.Unmarshal(env.Method, &method) != nil {
		return nil, &badRequest{answerTo, &api.Error{Code: api.CodeInvalidRequest, Message: `"method" must be a string naming the method, for example "exec"`}}
	}
	params := json.RawMessage(env.Params)
	switch {
	case len(params) == 0 || bytes.Equal(params, []byte("null")):
		params = nil
	case params[0] == '{':
	case params[0] == '[':
		return nil, &badRequest{answerTo, &api.Error{Code: api.CodeInvalidParams, Message: `"params" must be an object of named parameters; positional (array) params are not supported`}}
	default:
		return nil, &badRequest{answerTo, &api.Error{Code: api.CodeInvalidParams, Message: `"params" must be an object, for example {"command":"ls"}`}}
	}
	return &request{method: method, params: params, id: id, size: int64(len(line))}, nil
}

// checkID validates an id: absent (nil), null, a number or a string of at
// most maxIDBytes. It is returned as sent, except that a string with
// invalid UTF-8 is re-encoded so that responses stay valid JSON.
func checkID(raw json.RawMessage) (json.RawMessage, *api.Error) {
	if raw == nil {
		return nil, nil
	}
	if len(raw) > maxIDBytes {
		return nil, &api.Error{Code: api.CodeInvalidRequest, Message: fmt.Sprintf(`"id" is longer than %d bytes: use a short number or string`, maxIDBytes)}
	}
	switch c := raw[0]; {
	case c == 'n': // null
		return raw, nil
	case c == '-' || c >= '0' && c <= '9':
		return raw, nil
	case c == '"':
		if utf8.Valid(raw) {
			return raw, nil
		}
		var s string
		_ = json.Unmarshal(raw, &s)
		b, _ := json.Marshal(s)
		return b, nil
	}
	return nil, &api.Error{Code: api.CodeInvalidRequest, Message: `"id" must be a number, a string or null`}
}

// idKey is the key under which a running exec is found by the id of the
// request that started it: strings by their value, other ids as sent.
func idKey(id json.RawMessage) string {
	var s string
	if len(id) > 0 && id[0] == '"' && json.Unmarshal(id, &s) == nil {
		b, _ := json.Marshal(s)
		return string(b)
	}
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// quote quotes s for an error message, shortened when long.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
