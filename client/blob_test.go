package client

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
)

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return b
}

// rawLine sends a line as is.
func (f *fakeServer) rawLine(line string) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.conn.Write([]byte(line + "\n"))
}

// TestReadFileCut checks ReadFile on large responses, cut or not: the
// content is what encoding/json decodes, whatever the line looks like.
func TestReadFileCut(t *testing.T) {
	data := randomBytes(400<<10, 1)
	b64 := base64.StdEncoding.EncodeToString(data)
	pad := strings.Repeat("p", contentCutMin)
	for _, tc := range []struct {
		name   string
		result string // the result object
		want   []byte // nil: an error
	}{
		{"plain", `{"content":"` + b64 + `","size":1,"mode":420}`, data},
		{"small", `{"pad":"` + pad + `","content":"QUJD"}`, []byte("ABC")},
		{"empty", `{"pad":"` + pad + `","content":""}`, []byte{}},
		{"escapes", `{"content":"` + strings.ReplaceAll(b64, "/", `\/`) + `"}`, data},
		{"escaped letter", `{"content":"\u0051UJD` + b64 + `"}`, append([]byte("ABC"), data...)},
		{"duplicate", `{"content":"` + b64 + `","content":"QUJD"}`, []byte("ABC")},
		{"folded duplicate", `{"content":"` + b64 + `","Content":"QUJD"}`, []byte("ABC")},
		{"nested same key", `{"x":{"content":"QUJD"},"content":"` + b64 + `","y":[{"content":""}]}`, data},
		{"elsewhere only", `{"x":{"content":"` + b64 + `"}}`, []byte{}},
		{"invalid base64", `{"content":"` + b64[:1000] + `*` + b64[1001:] + `"}`, nil},
		{"not a string", `{"pad":"` + pad + `","content":7}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFake(t, Options{})
			type res struct {
				b   []byte
				err error
			}
			done := make(chan res, 1)
			go func() {
				b, err := c.Sandbox("sb").ReadFile(testCtx(t), "/f")
				done <- res{b, err}
			}()
			r := f.expect(t, api.MethodReadFile)
			var p api.ReadFileParams
			r.params(t, &p)
			if p.Path != "/f" || p.SandboxID != "sb" {
				t.Errorf("params %+v", p)
			}
			f.rawLine(`{"jsonrpc":"2.0","result":` + tc.result + `,"id":` + string(r.ID) + `}`)
			got := <-done
			switch {
			case tc.want == nil && got.err == nil:
				t.Errorf("ReadFile = %d bytes, want an error", len(got.b))
			case tc.want != nil && (got.err != nil || !bytes.Equal(got.b, tc.want)):
				t.Errorf("ReadFile = %d bytes, %v; want %d bytes", len(got.b), got.err, len(tc.want))
			}
			if tc.name == "invalid base64" && (got.err == nil || !strings.Contains(got.err.Error(), "protocol error: file content from the server is not base64: illegal base64 data at input byte 1000")) {
				t.Errorf("error %v", got.err)
			}
		})
	}
}

// TestRunCut checks Run on large results, cut or not: the output is what
// encoding/json decodes, whatever the line looks like.
func TestRunCut(t *testing.T) {
	out, errb := randomBytes(400<<10, 3), randomBytes(300<<10, 4)
	o64, e64 := base64.StdEncoding.EncodeToString(out), base64.StdEncoding.EncodeToString(errb)
	pad := strings.Repeat("p", contentCutMin)
	for _, tc := range []struct {
		name             string
		result           string
		wantOut, wantErr []byte // nil wantOut: an error
	}{
		{"both", `{"stdout":"` + o64 + `","stderr":"` + e64 + `","exit_code":3}`, out, errb},
		{"stderr first", `{"stderr":"` + e64 + `","exit_code":3,"stdout":"` + o64 + `"}`, out, errb},
		{"empty stderr", `{"stdout":"` + o64 + `","stderr":"","exit_code":3}`, out, []byte{}},
		{"no stderr", `{"stdout":"` + o64 + `","exit_code":3}`, out, []byte{}},
		{"small", `{"pad":"` + pad + `","stdout":"QUJD","stderr":"","exit_code":3}`, []byte("ABC"), []byte{}},
		{"escapes", `{"stdout":"` + strings.ReplaceAll(o64, "/", `\/`) + `","stderr":"` + e64 + `","exit_code":3}`, out, errb},
		{"duplicate", `{"stdout":"` + o64 + `","stdout":"QUJD","stderr":"","exit_code":3}`, []byte("ABC"), []byte{}},
		{"invalid base64", `{"stdout":"` + o64[:1000] + `*` + o64[1001:] + `","stderr":"","exit_code":3}`, nil, nil},
		{"invalid stderr", `{"stdout":"` + o64 + `","stderr":"` + e64[:10] + `*","exit_code":3}`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFake(t, Options{})
			type res struct {
				r   *Result
				err error
			}
			done := make(chan res, 1)
			go func() {
				r, err := c.Sandbox("sb").Run(testCtx(t), api.ExecParams{Argv: []string{"x"}})
				done <- res{r, err}
			}()
			r := f.expect(t, api.MethodExec)
			f.rawLine(`{"jsonrpc":"2.0","result":` + tc.result + `,"id":` + string(r.ID) + `}`)
			got := <-done
			switch {
			case tc.wantOut == nil && got.err == nil:
				t.Errorf("Run = %d bytes, want an error", len(got.r.Stdout))
			case tc.wantOut != nil && got.err != nil:
				t.Errorf("Run: %v", got.err)
			case tc.wantOut != nil && (!bytes.Equal(got.r.Stdout, tc.wantOut) || !bytes.Equal(got.r.Stderr, tc.wantErr) || got.r.ExitCode != 3):
				t.Errorf("Run = %d and %d bytes, exit %d; want %d and %d bytes, exit 3", len(got.r.Stdout), len(got.r.Stderr), got.r.ExitCode, len(tc.wantOut), len(tc.wantErr))
			}
		})
	}
}

// TestCallReadFileWhole checks that a call that does not take the content
// cut out (Call) gets the whole result of a large read_file.
func TestCallReadFileWhole(t *testing.T) {
	data := randomBytes(400<<10, 2)
	c, f := newFake(t, Options{})
	done := make(chan error, 1)
	var r api.ReadFileResult
	go func() { done <- c.Call(testCtx(t), api.MethodReadFile, api.ReadFileParams{Path: "/f"}, &r) }()
	req := f.expect(t, api.MethodReadFile)
	f.reply(req.ID, api.ReadFileResult{Content: base64.StdEncoding.EncodeToString(data), Size: int64(len(data))})
	if err := <-done; err != nil || r.Content != base64.StdEncoding.EncodeToString(data) || r.Size != int64(len(data)) {
		t.Errorf("Call: %v, %d bytes of content", err, len(r.Content))
	}
}

// TestWriteFileLine checks the request line of a large WriteFile: what
// encoding/json makes of it.
func TestWriteFileLine(t *testing.T) {
	for _, n := range []int{0, 1, 5, 3 << 20} {
		data := randomBytes(n, uint64(n))
		c, f := newFake(t, Options{})
		done := make(chan error, 1)
		go func() { done <- c.Sandbox("sb").WriteFile(testCtx(t), "/dir/\"quoted\" <f>", data, 0o640) }()
		r := f.expect(t, api.MethodWriteFile)
		var p api.WriteFileParams
		r.params(t, &p)
		want := api.WriteFileParams{SandboxID: "sb", Path: "/dir/\"quoted\" <f>", Content: base64.StdEncoding.EncodeToString(data), Mode: 0o640}
		if p != want {
			t.Errorf("WriteFile of %d bytes: params differ", n)
		}
		f.reply(r.ID, api.WriteFileResult{Size: int64(n)})
		if err := <-done; err != nil {
			t.Errorf("WriteFile of %d bytes: %v", n, err)
		}
	}
}
