package client

import (
	"bytes"
	"encoding/base64"
	"strconv"
)

// Output chunks of exec_stream are most of what a busy server sends, and
// decoding them as generic JSON costs several passes over each payload.
// parseChunk recognises the exact line encoding/json writes for an
// api.Response carrying an api.ExecChunk,
//
//	{"jsonrpc":"2.0","result":{"stdout":"<base64>"},"id":<integer>}
//
// (or "stderr"), and decodes it in one pass. Anything else, including
// such a line with a payload that is not plain base64, takes the generic
// path, so the fast path never changes what a line means.

const (
	chunkPrefix = `{"jsonrpc":"2.0","result":{"`
	chunkIDSep  = `"},"id":`
	stdoutKey   = `stdout":"`
	stderrKey   = `stderr":"`
)

// cutPrefix is bytes.CutPrefix with a string prefix.
func cutPrefix(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return b, false
	}
	return b[len(prefix):], true
}

// parseChunk returns the request id, the stream (stdoutStream or
// stderrStream) and the decoded output of a chunk line.
func parseChunk(line []byte) (id int64, stream int, data []byte, ok bool) {
	rest, found := cutPrefix(line, chunkPrefix)
	if !found {
		return 0, 0, nil, false
	}
	if r, found := cutPrefix(rest, stdoutKey); found {
		stream, rest = stdoutStream, r
	} else if r, found := cutPrefix(rest, stderrKey); found {
		stream, rest = stderrStream, r
	} else {
		return 0, 0, nil, false
	}
	end := bytes.LastIndex(rest, []byte(chunkIDSep))
	if end < 0 {
		return 0, 0, nil, false
	}
	payload, tail := rest[:end], rest[end+len(chunkIDSep):]
	tail, found = bytes.CutSuffix(bytes.TrimRight(tail, " \t\r"), []byte("}"))
	if !found || len(tail) == 0 || len(tail) > 18 || (tail[0] == '0' && len(tail) > 1) {
		return 0, 0, nil, false
	}
	for _, ch := range tail {
		if ch < '0' || ch > '9' {
			return 0, 0, nil, false
		}
	}
	id, err := strconv.ParseInt(string(tail), 10, 64)
	if err != nil || len(payload)%4 != 0 {
		return 0, 0, nil, false
	}
	data = make([]byte, base64.StdEncoding.DecodedLen(len(payload)))
	n, err := base64.StdEncoding.Decode(data, payload)
	// The decoder skips \r and \n, which JSON does not allow in a string:
	// with them the decoded length falls short.
	pad := len(payload) - len(bytes.TrimRight(payload, "="))
	if err != nil || n != len(payload)/4*3-pad {
		return 0, 0, nil, false
	}
	return id, stream, data[:n], true
}
