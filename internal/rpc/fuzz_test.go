package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"
)

// FuzzServeLine feeds one line to a session that has no sandbox and may
// not create one, so every method fails fast: the server must answer with
// exactly one valid JSON-RPC response (none for a valid notification),
// and never panic.
func FuzzServeLine(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","method":"info","id":1}`,
		`{"jsonrpc":"2.0","method":"exec","params":{"command":"echo hello"},"id":"x"}`,
		`{"jsonrpc":"2.0","method":"stdin","params":{"id":1,"data":"aGk="}}`,
		`[{"jsonrpc":"2.0","method":"info","id":1}]`,
		`{"jsonrpc":"2.0","method":"signal","params":{"id":1,"signal":"TERM"},"id":1e999}`,
	} {
		f.Add([]byte(seed))
	}
	srv := NewServer(Options{MaxMessage: 1 << 20})
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.ReplaceAll(line, []byte("\n"), []byte(" "))
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Serve(ctx, bytes.NewReader(append(line, '\n')), &out); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
		if out.Len() == 0 {
			lines = nil
		}
		if len(lines) > 1 {
			t.Fatalf("%d lines for one request:\n%s", len(lines), out.Bytes())
		}
		req, bad := parseRequest(line)
		notification := bad == nil && (req == nil || req.id == nil)
		if notification {
			if len(lines) != 0 {
				t.Fatalf("answer to a notification or blank line: %s", out.Bytes())
			}
			return
		}
		if len(lines) != 1 {
			t.Fatalf("no answer to %q", line)
		}
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(lines[0], &resp); err != nil || !json.Valid(lines[0]) {
			t.Fatalf("answer is not a valid JSON object: %v: %s", err, lines[0])
		}
		id, hasID := resp["id"]
		result, hasResult := resp["result"]
		rawErr, hasErr := resp["error"]
		if string(resp["jsonrpc"]) != `"2.0"` || !hasID || hasResult == hasErr || len(resp) != 3 {
			t.Fatalf("malformed response: %s", lines[0])
		}
		if hasErr {
			var e struct {
				Code    *int   `json:"code"`
				Message string `json:"message"`
			}
			if json.Unmarshal(rawErr, &e) != nil || e.Code == nil || e.Message == "" {
				t.Fatalf("malformed error: %s", lines[0])
			}
		} else if len(result) == 0 {
			t.Fatalf("empty result: %s", lines[0])
		}
		want := json.RawMessage("null")
		if req != nil {
			want = req.id
		} else if bad != nil {
			want = bad.id
		}
		if !bytes.Equal(id, want) {
			t.Fatalf("id %s, want %s", id, want)
		}
	})
}
