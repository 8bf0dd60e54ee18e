package rpc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// writeFileOutcome is what the server makes of a write_file line before
// it touches a sandbox.
type writeFileOutcome struct {
	Bad    *badRequest
	Method string
	ID     string
	Params api.WriteFileParams // Content left out
	Data   []byte
	Err    *api.Error
}

// decodeWriteFile runs a line through parseRequest and the params of
// write_file: with the content cut out of a large line (cut), or the
// ordinary way.
func decodeWriteFile(line []byte, cut bool) (o writeFileOutcome) {
	var req *request
	var bad *badRequest
	if cut {
		req, bad = parseRequest(line)
	} else {
		req, bad = parseLine(line)
	}
	if bad != nil || req == nil {
		return writeFileOutcome{Bad: bad}
	}
	o = writeFileOutcome{Method: req.method, ID: string(req.id)}
	if req.method != api.MethodWriteFile {
		return o
	}
	// (After an error the params are not used.)
	defer func() { o.Params.Content = "" }()
	if o.Err = decodeParams(api.MethodWriteFile, req.params, &o.Params); o.Err != nil {
		return o
	}
	o.Data, o.Err = writeFileContent(&job{req: req}, &o.Params)
	return o
}

// checkSameWriteFile checks that cutting the content out of line changes
// nothing, and returns the outcome.
func checkSameWriteFile(t *testing.T, line []byte) writeFileOutcome {
	t.Helper()
	slow := decodeWriteFile(line, false)
	fast := decodeWriteFile(line, true)
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("line %.300q:\ncut:        %s\nwithout:    %s", line, describe(fast), describe(slow))
	}
	return fast
}

func describe(o writeFileOutcome) string {
	return fmt.Sprintf("bad %+v method %q id %.100s params %.300q data %d bytes %.40q err %.300q", o.Bad, o.Method, o.ID, fmt.Sprintf("%+v", o.Params), len(o.Data), o.Data, fmt.Sprintf("%+v", o.Err))
}

// writeFileLine is a write_file request line whose content is the given
// JSON string literal text (without quotes), padded with extra members
// so that the line is at least size bytes.
func writeFileLine(content string, size int, extra string) []byte {
	line := `{"jsonrpc":"2.0","method":"write_file","params":{"path":"/workspace/f","content":"` + content + `"` + extra + `},"id":7}`
	if pad := size - len(line); pad > 0 {
		line = strings.Replace(line, `"id":7`, `"pad":"`+strings.Repeat("p", max(pad-9, 0))+`","id":7`, 1)
	}
	return []byte(line)
}

// TestWriteFileCut checks lines that must be decoded as encoding/json
// decodes them, whether or not the fast path takes them.
func TestWriteFileCut(t *testing.T) {
	data := make([]byte, 300<<10)
	rand.NewChaCha8([32]byte{9}).Read(data)
	b64 := base64.StdEncoding.EncodeToString(data)
	pad := contentCutMin + 100

	for _, tc := range []struct {
		name string
		line []byte
		want []byte // nil: an error
		cut  bool   // the fast path takes it
	}{
		{"plain", writeFileLine(b64, 0, ""), data, true},
		{"small", writeFileLine("QUJD", pad, ""), []byte("ABC"), true},
		{"empty", writeFileLine("", pad, ""), []byte{}, true},
		{"escaped \\u0041", writeFileLine(`Q\u0055JD`+b64, 0, ""), append([]byte("ABC"), data...), false},
		{"escaped \\/", writeFileLine(strings.ReplaceAll(b64, "/", `\/`), 0, ""), data, false},
		{"escaped quote", writeFileLine(`QUJD\"`, pad, ""), nil, false},
		{"duplicate content", writeFileLine(b64, 0, `,"content":"QUJD"`), []byte("ABC"), false},
		{"duplicate content, folded", writeFileLine("QUJD", pad, `,"Content":"REVG"`), []byte("DEF"), false},
		{"duplicate params", []byte(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"` + b64 + `"},"params":{"path":"/b","content":"QUJD"},"id":1}`), []byte("ABC"), false},
		// Params take no members but their own: these are refused
		// (unknown "x"), the same with the cut as without.
		{"nested same key", writeFileLine(b64, 0, `,"x":{"content":"QUJD"},"y":[{"content":"REVG"}]`), nil, true},
		{"content elsewhere only", []byte(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","x":{"content":"` + b64 + `"}},"id":1}`), nil, false},
		{"content at the top", []byte(`{"jsonrpc":"2.0","method":"write_file","content":"` + b64 + `","params":{"path":"/a","content":"QUJD"},"id":1}`), []byte("ABC"), true},
		{"invalid base64", writeFileLine(b64[:len(b64)-4]+"*AAA", 0, ""), nil, true},
		{"invalid base64 early", writeFileLine("QU=D"+b64, 0, ""), nil, true},
		{"truncated base64", writeFileLine(b64[:len(b64)-1], 0, ""), nil, true},
		{"raw newline escape", writeFileLine(b64[:40]+`\n`+b64[40:], 0, ""), data, false},
		{"raw tab", writeFileLine(b64[:40]+"\t"+b64[40:], 0, ""), nil, false},
		{"non-ASCII", writeFileLine("QUJD"+"é", pad, ""), nil, true},
		{"not a string", []byte(`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":["` + b64 + `"]},"id":1}`), nil, false},
		{"bad mode", writeFileLine(b64, 0, `,"mode":"x"`), nil, true},
		{"not write_file", []byte(`{"jsonrpc":"2.0","method":"stdin","params":{"id":1,"content":"` + b64 + `"},"id":1}`), nil, false},
		{"invalid JSON", append(writeFileLine(b64, 0, ""), '}'), nil, false},
		{"whitespace", []byte(" \t" + string(writeFileLine(b64, 0, "")) + " \r"), data, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := checkSameWriteFile(t, tc.line)
			if tc.want != nil && (o.Err != nil || o.Bad != nil || !bytes.Equal(o.Data, tc.want)) {
				t.Errorf("got %s, want %d bytes", describe(o), len(tc.want))
			}
			if tc.want == nil && o.Method == api.MethodWriteFile && o.Err == nil {
				t.Errorf("got %s, want an error", describe(o))
			}
			if req, _ := parseRequest(tc.line); (req != nil && req.content != nil) != tc.cut {
				t.Errorf("cut %v, want %v", !tc.cut, tc.cut)
			}
		})
	}
	o := checkSameWriteFile(t, writeFileLine(b64[:len(b64)-4]+"*AAA", 0, ""))
	if o.Err == nil || o.Err.Code != api.CodeInvalidParams || !strings.Contains(o.Err.Message, "not valid base64") {
		t.Errorf("invalid base64: %+v", o.Err)
	}
}

// TestWriteFileCutSizes goes across the size from which lines are cut.
func TestWriteFileCutSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for size := contentCutMin - 8; size <= contentCutMin+8; size++ {
		data := make([]byte, r.IntN(1000))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		line := writeFileLine(base64.StdEncoding.EncodeToString(data), size, "")
		line = line[:len(line)-len(`,"id":7}`)]
		line = append(line, `,"id":7`+strings.Repeat(" ", max(size-len(line)-len(`,"id":7}`), 0))+`}`...)
		o := checkSameWriteFile(t, line)
		if !bytes.Equal(o.Data, data) || o.Err != nil {
			t.Fatalf("line of %d bytes: %s", len(line), describe(o))
		}
		req, _ := parseRequest(line)
		if (req.content != nil) != (len(line) >= contentCutMin) {
			t.Fatalf("line of %d bytes: cut %v", len(line), req.content != nil)
		}
	}
}

// FuzzWriteFileCut compares, on any line, the server's decoding of a
// write_file request with its content cut out and without.
func FuzzWriteFileCut(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"QUJD","mode":420},"id":1}`,
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"Q\u0055JD"},"id":1}`,
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"QUJD","CONTENT":"REVG"},"id":1}`,
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"QU=D"},"id":1}`,
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"","content":"QUJD"}}`,
		`{"jsonrpc":"2.0","method":"write_file","params":{"path":"/a","content":"QUJD","mode":1e3},"id":[1]}`,
		`{"jsonrpc":"1.0","method":"write_file","params":{"content":"QUJD"},"id":1}`,
		`{"jsonrpc":"2.0","method":"read_file","params":{"content":"QUJD"},"id":1}`,
	} {
		f.Add([]byte(seed))
	}
	defer func(n int) { contentCutMin = n }(contentCutMin)
	contentCutMin = 0
	f.Fuzz(func(t *testing.T, line []byte) {
		checkSameWriteFile(t, line)
	})
}

// TestWriteFileCutResponse checks the error a client gets for a large
// line with invalid base64, through a session.
func TestWriteFileCutResponse(t *testing.T) {
	c := newClient(t, Options{}, ServeOptions{})
	b64 := base64.StdEncoding.EncodeToString(make([]byte, 300<<10))
	c.send(string(writeFileLine(b64[:1000]+"!"+b64[1001:], 0, "")))
	m := c.next(7, 30*time.Second)
	var e api.Error
	if err := json.Unmarshal(m["error"], &e); err != nil || e.Code != api.CodeInvalidParams || !strings.Contains(e.Message, `"content" is not valid base64 (illegal base64 data at input byte 1000)`) {
		t.Errorf("response %s", m)
	}
}

// TestFilesAroundCutSize writes files whose request and response lines
// are around the size from which the content is cut out, through the Go
// client, and reads them back through it and as plain JSON.
func TestFilesAroundCutSize(t *testing.T) {
	_, sb := serveClient(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	sbID := c.create(1, nil)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 8))
	near := (contentCutMin - 100) / 4 * 3
	sizes := []int{0, 1, 2, 3, 3 << 20, 3<<20 + 1}
	for n := near - 120; n <= near+120; n += 17 {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		if err := sb.WriteFile(ctx, "/workspace/f", data, 0o600); err != nil {
			t.Fatalf("WriteFile of %d bytes: %v", n, err)
		}
		got, err := sb.ReadFile(ctx, "/workspace/f")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadFile of %d bytes: %d bytes, %v", n, len(got), err)
		}
		// The same through a session driven with encoding/json.
		var w api.WriteFileResult
		c.result(nil2(), api.MethodWriteFile, api.WriteFileParams{SandboxID: sbID, Path: "/workspace/g", Content: base64.StdEncoding.EncodeToString(data), Mode: 0o600}, &w)
		var rf api.ReadFileResult
		c.result(nil2(), api.MethodReadFile, api.ReadFileParams{SandboxID: sbID, Path: "/workspace/g"}, &rf)
		if w.Size != int64(n) || rf.Content != base64.StdEncoding.EncodeToString(data) || rf.Size != int64(n) || rf.Mode != 0o600 {
			t.Fatalf("write_file and read_file of %d bytes: %+v, size %d mode %o, content differs: %v", n, w, rf.Size, rf.Mode, rf.Content != base64.StdEncoding.EncodeToString(data))
		}
	}
}

// TestLargeWriteFileErrors checks large write_file requests (cut out of
// their line) that fail: invalid content is refused before anything else,
// as for a small request, and leaves the sandbox as it was.
func TestLargeWriteFileErrors(t *testing.T) {
	needAgent(t)
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	sbID := c.create(1, nil)
	data := make([]byte, 1<<20+1)
	rand.NewChaCha8([32]byte{3}).Read(data)
	b64 := base64.StdEncoding.EncodeToString(data)
	bad := b64[:len(b64)-1000] + "*" + b64[len(b64)-999:]
	send := func(id int, path, content, extra string) msg {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"write_file","params":{"sandbox_id":%q,"path":%q,"content":"%s"%s},"id":%d}`, sbID, path, content, extra, id))
		return c.next(id, time.Minute)
	}
	state := func() string {
		t.Helper()
		return unb64(t, c.exec(nil2(), map[string]any{"command": "md5sum /workspace/f; ls -a /workspace", "sandbox_id": sbID}).Stdout)
	}
	c.result(1, api.MethodWriteFile, map[string]any{"sandbox_id": sbID, "path": "/workspace/f", "content": "b2xkCg=="}, nil)
	before := state()
	e := wantError(t, send(2, "/workspace/f", bad, ""), api.CodeInvalidParams)
	if !strings.Contains(e.Message, fmt.Sprintf(`"content" is not valid base64 (illegal base64 data at input byte %d)`, len(b64)-1000)) {
		t.Errorf("invalid content: %s", e.Message)
	}
	for i, tc := range []struct{ path, extra string }{
		{"/workspace/newdir/f", ""},      // a directory that does not exist
		{"/workspace", ""},               // a directory
		{"/workspace/f", `,"mode":4096`}, // a bad mode
		{"/workspace/f", `,"sandbox_id":"nope"`},
	} {
		if e := wantError(t, send(3+i, tc.path, bad, tc.extra), api.CodeInvalidParams); !strings.Contains(e.Message, "base64") {
			t.Errorf("invalid content to %s%s: %s", tc.path, tc.extra, e.Message)
		}
	}
	if after := state(); after != before {
		t.Errorf("the sandbox changed:\n%s\nwas\n%s", after, before)
	}
	// With valid content, the other errors.
	wantError(t, send(10, "/workspace", b64, ""), api.CodeFileError)
	wantError(t, send(11, "/workspace/f", b64, `,"mode":4096`), api.CodeInvalidParams)
	wantError(t, send(12, "/workspace/f", b64, `,"sandbox_id":"nope"`), api.CodeNotFound)
	var w api.WriteFileResult
	if err := json.Unmarshal(send(13, "/workspace/newdir/f", b64, `,"mode":384`)["result"], &w); err != nil || w.Size != int64(len(data)) {
		t.Errorf("write_file: %+v, %v", w, err)
	}
}
