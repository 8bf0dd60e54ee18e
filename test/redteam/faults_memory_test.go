package redteam_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// rpcProc is an `airlock rpc` process (bins.cli) driven through pipes, as
// a client program drives it.
type rpcProc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startRPC(t *testing.T, args ...string) *rpcProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bins.cli, append([]string{"rpc"}, args...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+t.TempDir())
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			cancel()
			<-done
		}
		cancel()
	})
	return &rpcProc{t: t, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
}

// answer reads lines until the response with id, skipping notifications.
func (p *rpcProc) answer(id string) map[string]json.RawMessage {
	p.t.Helper()
	for {
		line, err := p.out.ReadBytes('\n')
		if err != nil {
			p.t.Fatalf("read the answer to %s: %v", id, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			p.t.Fatalf("answer line %.200q: %v", line, err)
		}
		if string(m["id"]) == id {
			return m
		}
	}
}

func (p *rpcProc) call(id, method, params string) map[string]json.RawMessage {
	p.t.Helper()
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`+"\n", id, method, params)
	return p.answer(id)
}

// echo checks that the server still runs commands.
func (p *rpcProc) echo(id string) {
	p.t.Helper()
	m := p.call(id, "exec", `{"argv":["echo","alive"]}`)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	json.Unmarshal(m["result"], &res)
	if out, _ := base64.StdEncoding.DecodeString(res.Stdout); res.ExitCode != 0 || string(out) != "alive\n" {
		p.t.Fatalf("exec after large lines: %s %s", m["result"], m["error"])
	}
}

// sendLine writes one request line whose params hold a string of n bytes
// (as a file's content, for write_file), a megabyte at a time.
func (p *rpcProc) sendLine(id, method, field string, n int) {
	p.t.Helper()
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":%s,"method":%q,"params":{"path":"/tmp/big","%s":"`, id, method, field)
	chunk := bytes.Repeat([]byte("QUJD"), 1<<18)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := p.in.Write(chunk[:k]); err != nil {
			p.t.Fatalf("send a large line: %v", err)
		}
		n -= k
	}
	io.WriteString(p.in, "\"}}\n")
}

// memory reads a field of the process's /proc status, in bytes.
func (p *rpcProc) memory(field string) int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				p.t.Fatal(err)
			}
			return kb << 10
		}
	}
	p.t.Fatalf("no %s in /proc status", field)
	return 0
}

func (p *rpcProc) wantCode(m map[string]json.RawMessage, code int) {
	p.t.Helper()
	var e struct {
		Code int `json:"code"`
	}
	json.Unmarshal(m["error"], &e)
	if e.Code != code {
		p.t.Fatalf("answer %s %s, want error %d", m["result"], m["error"], code)
	}
}

const mib = 1 << 20

// TestFaultOversizedLines sends `airlock rpc` request lines of 200 MB,
// over its limit, again and again: each is answered as too long, what
// the server held of it is given back at once, its peak memory stays
// within the limit's worth above where it started, and it keeps serving.
// A line within the limit costs at most about twice its size, and that
// too is given back once the server is idle.
func TestFaultOversizedLines(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		for _, limitMiB := range []int64{16, 128} {
			t.Run(fmt.Sprintf("limit-%dMiB", limitMiB), func(t *testing.T) {
				p := startRPC(t, "--max-message-mb", strconv.FormatInt(limitMiB, 10))
				if m := p.call(`"c"`, "create", fmt.Sprintf(`{"isolation":%q}`, lv)); m["error"] != nil {
					t.Fatalf("create: %s", m["error"])
				}
				p.echo(`"warm"`)
				base := p.memory("VmHWM")
				for i := range 4 {
					id := strconv.Itoa(i)
					p.sendLine(id, "write_file", "content", 200*mib)
					p.wantCode(p.answer("null"), -32003)
					// Given back before it was answered.
					if rss := p.memory("VmRSS"); rss > base+32*mib {
						t.Errorf("after line %d over the limit: resident %d MiB, %d MiB above the start", i, rss/mib, (rss-base)/mib)
					}
				}
				p.echo(`"after"`)
				peak := p.memory("VmHWM") - base
				t.Logf("peak above the start after four 200 MB lines: %d MiB (limit %d MiB)", peak/mib, limitMiB)
				if bound := limitMiB*mib + 48*mib; peak > bound {
					t.Errorf("peak memory grew by %d MiB over four lines over a %d MiB limit; want at most %d MiB", peak/mib, limitMiB, bound/mib)
				}
			})
		}

		// Within the (default) limit: a file of 90 MiB, as 120 MiB of
		// base64.
		t.Run("within-limit", func(t *testing.T) {
			p := startRPC(t)
			if m := p.call(`"c"`, "create", fmt.Sprintf(`{"isolation":%q}`, lv)); m["error"] != nil {
				t.Fatalf("create: %s", m["error"])
			}
			p.echo(`"warm"`)
			const size = 120 * mib
			base := p.memory("VmHWM")
			p.sendLine(`"w"`, "write_file", "content", size)
			m := p.answer(`"w"`)
			if !bytes.Contains(m["result"], []byte(fmt.Sprintf(`"size":%d`, size/4*3))) {
				t.Fatalf("write_file of %d bytes: %s %s", size/4*3, m["result"], m["error"])
			}
			growth := p.memory("VmHWM") - base
			t.Logf("peak above the start for a %d MiB line: %d MiB", size/mib, growth/mib)
			if growth > size*9/4 {
				t.Errorf("a %d MiB line took %d MiB: more than about twice its size", size/mib, growth/mib)
			}
			p.echo(`"after-write"`)
			// Given back once idle (the server keeps large buffers for
			// the next transfer for a while).
			deadline := time.Now().Add(time.Minute)
			for p.memory("VmRSS") > base+32*mib {
				if time.Now().After(deadline) {
					t.Fatalf("resident %d MiB above the start a minute after the transfer", (p.memory("VmRSS")-base)/mib)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	})
}
