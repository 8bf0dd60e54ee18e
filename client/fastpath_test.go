package client

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
)

func TestParseChunk(t *testing.T) {
	for _, tc := range []struct {
		line   string
		ok     bool
		id     int64
		stream int
		data   string
	}{
		{`{"jsonrpc":"2.0","result":{"stdout":"aGVsbG8K"},"id":12}`, true, 12, stdoutStream, "hello\n"},
		{`{"jsonrpc":"2.0","result":{"stderr":"aGk="},"id":3} `, true, 3, stderrStream, "hi"},
		{`{"jsonrpc":"2.0","result":{"stdout":""},"id":1}`, true, 1, stdoutStream, ""},
		// Anything else takes the generic path.
		{`{"jsonrpc":"2.0","result":{"stdout":"a\/=="},"id":1}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"aGk=","done":true},"id":1}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"aGk="},"id":"1"}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"aGk="},"id":-1}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"aGk="},"id":1,"x":2}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"aG\rk="},"id":1}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"a"b"},"id":1}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"stdout":"aGk="},"id":1`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","id":1,"result":{"stdout":"aGk="}}`, false, 0, 0, ""},
		{`{"jsonrpc":"2.0","result":{"exit_code":0},"id":1}`, false, 0, 0, ""},
	} {
		id, stream, data, ok := parseChunk([]byte(tc.line))
		if ok != tc.ok || id != tc.id || stream != tc.stream || string(data) != tc.data {
			t.Errorf("parseChunk(%s) = %d, %d, %q, %v; want %d, %d, %q, %v", tc.line, id, stream, data, ok, tc.id, tc.stream, tc.data, tc.ok)
		}
		// Whatever the fast path accepts is a valid JSON-RPC response.
		if ok && !json.Valid([]byte(tc.line)) {
			t.Errorf("parseChunk accepted invalid JSON %s", tc.line)
		}
	}
}

// FuzzParseChunk checks that the fast path agrees with encoding/json on
// every line it accepts.
func FuzzParseChunk(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","result":{"stdout":"aGVsbG8K"},"id":12}`))
	f.Add([]byte(`{"jsonrpc":"2.0","result":{"stderr":"aGk="},"id":3} `))
	f.Fuzz(func(t *testing.T, line []byte) {
		id, stream, data, ok := parseChunk(line)
		if !ok {
			return
		}
		var m struct {
			ID     int64         `json:"id"`
			Result api.ExecChunk `json:"result"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", line, err)
		}
		want := [2]string{m.Result.Stdout, m.Result.Stderr}[stream]
		got, err := decodeBase64("output", want)
		if err != nil || m.ID != id || string(got) != string(data) {
			t.Fatalf("%q: fast path %d %q, encoding/json %d %q (%v)", line, id, data, m.ID, got, err)
		}
	})
}

// TestStreamingGenericPath sends chunks the fast path does not take.
func TestStreamingGenericPath(t *testing.T) {
	c, f := newFake(t, Options{})
	p, err := c.Sandbox("").Start(testCtx(t), api.ExecParams{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	r := f.expect(t, api.MethodExecStream)
	f.wmu.Lock()
	f.conn.Write([]byte(`{"jsonrpc":"2.0","id":` + string(r.ID) + `,"result":{"stdout":"aGVs"}}` + "\n"))
	f.conn.Write([]byte(`{"id":` + string(r.ID) + `, "result": {"stdout": "bG8=", "stderr": "ZQ=="}, "jsonrpc": "2.0"}` + "\n"))
	f.conn.Write([]byte(`{"jsonrpc":"2.0","result":{"stdout":"\/w=="},"id":` + string(r.ID) + "}\n"))
	f.wmu.Unlock()
	f.reply(r.ID, api.ExecResult{Done: true, ExitCode: 1})
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "hello\xff" {
		t.Errorf("stdout %q, %v", out, err)
	}
	if e, err := io.ReadAll(p.Stderr()); err != nil || string(e) != "e" {
		t.Errorf("stderr %q, %v", e, err)
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 1 {
		t.Errorf("Wait: %+v, %v", res, err)
	}
}
