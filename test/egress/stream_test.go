package egress_test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// stream is a command running in a sandbox whose output is read line by
// line as it comes.
type stream struct {
	p     *airlock.Process
	lines chan string
	done  chan *airlock.ExecResult
}

// startStream starts command in sb with its standard output streamed,
// and its standard input open when stdin is set.
func startStream(t *testing.T, sb *airlock.Sandbox, command string, stdin bool) *stream {
	t.Helper()
	pr, pw := io.Pipe()
	s := &stream{lines: make(chan string, 64), done: make(chan *airlock.ExecResult, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	p, err := sb.Start(ctx, airlock.Command{Shell: command, Stdout: pw, OpenStdin: stdin})
	if err != nil {
		t.Fatalf("start %q: %v", command, err)
	}
	s.p = p
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	go func() {
		res, err := p.Wait()
		pw.Close()
		if err != nil {
			res = &airlock.ExecResult{ExitCode: -1, Stderr: []byte(err.Error())}
		}
		s.done <- res
	}()
	t.Cleanup(func() { p.Kill() })
	return s
}

// line returns the next line of output; it fails the test when the
// output ends first, or when none comes within a minute (a hang).
func (s *stream) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			t.Fatalf("the command's output ended early")
		}
		return l
	case <-time.After(time.Minute):
		t.Fatalf("no line of output in a minute")
	}
	return ""
}

// wait waits for the command to end, and returns the rest of its output.
func (s *stream) wait(t *testing.T) (string, *airlock.ExecResult) {
	t.Helper()
	var rest []string
	for l := range s.lines {
		rest = append(rest, l)
	}
	select {
	case res := <-s.done:
		return strings.Join(rest, "\n"), res
	case <-time.After(time.Minute):
		t.Fatalf("the command did not end in a minute")
	}
	return "", nil
}
