package redteam_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// echo runs echo through exec request id and checks that it printed
// "alive".
func (s *rpcSession) echo(id int) {
	s.t.Helper()
	s.send(id, "exec", map[string]any{"argv": []string{"echo", "alive"}})
	m := s.response(id)
	var res execResult
	json.Unmarshal(m.Result, &res)
	if out, _ := base64.StdEncoding.DecodeString(res.Stdout); m.Error != nil || res.ExitCode != 0 || string(out) != "alive\n" {
		s.t.Fatalf("exec after large lines: %s %+v", m.Result, m.Error)
	}
}

// sendLine writes one request line whose params hold a string of n bytes
// (as a file's content, for write_file), a megabyte at a time.
func (s *rpcSession) sendLine(id int, method, field string, n int) {
	s.t.Helper()
	fmt.Fprintf(s.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"path":"/tmp/big","%s":"`, id, method, field)
	chunk := bytes.Repeat([]byte("QUJD"), 1<<18)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := s.in.Write(chunk[:k]); err != nil {
			s.t.Fatalf("send a large line: %v", err)
		}
		n -= k
	}
	io.WriteString(s.in, "\"}}\n")
}

// unattributed reads lines until a response with a null id (the answer
// to a line that could not be read as a request).
func (s *rpcSession) unattributed() rpcMsg {
	s.t.Helper()
	for {
		if m := s.next(); m.Method == "" && string(m.ID) == "null" {
			return m
		}
	}
}

// memory reads a field of the process's /proc status, in bytes.
func (s *rpcSession) memory(field string) int64 {
	s.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		s.t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				s.t.Fatal(err)
			}
			return kb << 10
		}
	}
	s.t.Fatalf("no %s in /proc status", field)
	return 0
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
				p := startRPC(t, nil, "--max-message-mb", strconv.FormatInt(limitMiB, 10))
				p.create(1, string(lv))
				p.echo(2)
				base := p.memory("VmHWM")
				for i := range 4 {
					p.sendLine(10+i, "write_file", "content", 200*mib)
					if m := p.unattributed(); m.Error == nil || m.Error.Code != -32003 {
						t.Fatalf("a line over the limit: %s %+v, want error -32003", m.Result, m.Error)
					}
					// Given back before it was answered.
					if rss := p.memory("VmRSS"); rss > base+32*mib {
						t.Errorf("after line %d over the limit: resident %d MiB, %d MiB above the start", i, rss/mib, (rss-base)/mib)
					}
				}
				p.echo(3)
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
			p := startRPC(t, nil)
			p.create(1, string(lv))
			p.echo(2)
			const size = 120 * mib
			base := p.memory("VmHWM")
			p.sendLine(4, "write_file", "content", size)
			m := p.response(4)
			if !bytes.Contains(m.Result, []byte(fmt.Sprintf(`"size":%d`, size/4*3))) {
				t.Fatalf("write_file of %d bytes: %s %+v", size/4*3, m.Result, m.Error)
			}
			growth := p.memory("VmHWM") - base
			t.Logf("peak above the start for a %d MiB line: %d MiB", size/mib, growth/mib)
			if growth > size*9/4 {
				t.Errorf("a %d MiB line took %d MiB: more than about twice its size", size/mib, growth/mib)
			}
			p.echo(5)
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
