package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/outlog"
)

// logOf writes parts (a leading "!" marks stderr) to a log, one second
// apart from t0, and reads it back whole.
func logOf(t *testing.T, t0 time.Time, parts ...string) []outlog.Piece {
	t.Helper()
	path := filepath.Join(t.TempDir(), "main.log")
	w, err := outlog.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		s := outlog.Stdout
		if rest, ok := strings.CutPrefix(p, "!"); ok {
			s, p = outlog.Stderr, rest
		}
		w.Write(s, []byte(p), t0.Add(time.Duration(i)*time.Second))
	}
	w.Close()
	r, err := outlog.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ps, err := r.Next(true)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func printed(t *testing.T, p logPrinter, ps []outlog.Piece) (string, string) {
	t.Helper()
	var out, errb strings.Builder
	p.stdout, p.stderr = &out, &errb
	if err := p.print(ps); err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String()
}

func TestLastLines(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		log  []string
		n    int
		want string
	}{
		{[]string{"a\nb\nc\n"}, 2, "b\nc\n"},
		{[]string{"a\nb\nc\n"}, 0, ""},
		{[]string{"a\nb\nc\n"}, 3, "a\nb\nc\n"},
		{[]string{"a\nb\nc\n"}, 10, "a\nb\nc\n"},
		{[]string{"a\nb\nc"}, 1, "c"},
		{[]string{"a\nb\nc"}, 2, "b\nc"},
		{nil, 5, ""},
		{[]string{"\n\n\n"}, 2, "\n\n"},
		{[]string{"a\n", "b", "c\nd\n"}, 2, "bc\nd\n"}, // a line written in two parts is one line
	} {
		out, _ := printed(t, logPrinter{}, lastLines(logOf(t, t0, tc.log...), tc.n))
		if out != tc.want {
			t.Errorf("tail %d of %q: %q, want %q", tc.n, tc.log, out, tc.want)
		}
	}
}

func TestLogStreamsAndTimes(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	ps := logOf(t, t0, "out 1\n", "!err 1\n", "out 2\n", "!err 2\n")
	out, errs := printed(t, logPrinter{}, ps)
	if out != "out 1\nout 2\n" || errs != "err 1\nerr 2\n" {
		t.Errorf("streams apart: %q %q", out, errs)
	}
	// --tail counts lines of both streams as they came.
	out, errs = printed(t, logPrinter{}, lastLines(ps, 2))
	if out != "out 2\n" || errs != "err 2\n" {
		t.Errorf("--tail 2: %q %q", out, errs)
	}
	p := logPrinter{stamps: true, from: t0.Add(time.Second), to: t0.Add(3 * time.Second)}
	out, errs = printed(t, p, p.keep(ps))
	if out != "2026-11-28T10:00:02Z out 2\n" || errs != "2026-11-28T10:00:01Z err 1\n" {
		t.Errorf("--since, --until, -t: %q %q", out, errs)
	}
}

func TestParseLogTime(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Time{
		"":                     {},
		"10m":                  now.Add(-10 * time.Minute),
		"2026-11-28T09:00:00Z": now.Add(-time.Hour),
		"1700000000":           time.Unix(1700000000, 0),
		"1700000000.5":         time.Unix(1700000000, 5e8),
	} {
		got, err := parseLogTime("--since", v, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"yesterday", "-5m", "10 minutes"} {
		if _, err := parseLogTime("--since", v, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("%q: %v", v, err)
		}
	}
}
