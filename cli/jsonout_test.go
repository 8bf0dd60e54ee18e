package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWriteResult: the streamed result is the JSON of the whole result,
// for output of every kind and size.
func TestWriteResult(t *testing.T) {
	big := bytes.Repeat([]byte("\x00\x1b\u009b\"\\é"), 100000)
	bin := bytes.Repeat([]byte{0xff, 0, 1, 2}, 70000)
	kill := "timeout"
	for _, tc := range []struct{ stdout, stderr []byte }{
		{nil, nil},
		{[]byte("hello\n"), []byte("warn\n")},
		{big, bin},
		{bin, big},
	} {
		r := jsonResult{SandboxID: "sb-1", ExitCode: 3, KilledBy: &kill, Notes: []string{`a","stdout":"`}}
		var out bytes.Buffer
		if err := writeResult(&out, r, tc.stdout, tc.stderr); err != nil {
			t.Fatal(err)
		}
		if c, ok := raw(out.String(), true); ok {
			t.Errorf("%q reaches the terminal", c)
		}
		var got jsonResult
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		for _, s := range []struct {
			name, text, enc string
			want            []byte
		}{{"stdout", got.Stdout, got.StdoutEncoding, tc.stdout}, {"stderr", got.Stderr, got.StderrEncoding, tc.stderr}} {
			b := []byte(s.text)
			if s.enc == "base64" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(s.text); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(b, s.want) {
				t.Errorf("%s (%q encoding): %d bytes back, want %d", s.name, s.enc, len(b), len(s.want))
			}
		}
		if got.SandboxID != "sb-1" || got.ExitCode != 3 || *got.KilledBy != "timeout" || got.Notes[0] != r.Notes[0] {
			t.Errorf("result fields: %+v", got)
		}
		if !strings.HasSuffix(out.String(), "}\n") {
			t.Errorf("the result does not end its line")
		}
	}
}

// TestJSONOutputMemory: printing a --json result takes no memory beyond
// the output kept, whatever it is: 16 MiB of NUL bytes (six times larger
// as JSON text) or of random bytes (base64), compared with 16 KiB of the
// same, by the peak RSS of the CLI.
func TestJSONOutputMemory(t *testing.T) {
	t.Parallel()
	const big, small = 16 << 20, 16 << 10
	for _, source := range []string{"/dev/zero", "/dev/urandom"} {
		peak := func(n int) int64 {
			out, rss := peakRSS(t, cliBin, "run", "--json", "--", "head", "-c", fmt.Sprint(n), source)
			var r jsonResult
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("the result of %d bytes of %s is not JSON: %v", n, source, err)
			}
			b := []byte(r.Stdout)
			if r.StdoutEncoding == "base64" {
				b, _ = base64.StdEncoding.DecodeString(r.Stdout)
			}
			if len(b) != n || (source == "/dev/zero" && !bytes.Equal(b, make([]byte, n))) {
				t.Fatalf("%s: %d bytes back (%q encoding), want %d", source, len(b), r.StdoutEncoding, n)
			}
			return rss
		}
		base, large := peak(small), peak(big)
		t.Logf("%s: peak RSS %d MiB with 16 KiB of output, %d MiB with 16 MiB", source, base>>20, large>>20)
		// The output kept, the buffer it grew in, the garbage of the
		// pieces and what the collector lets pile up before it runs
		// (which varies from run to run): at most four times its size,
		// where encoding the result whole took twenty-five.
		if large-base > 4*big {
			t.Errorf("%s: 16 MiB of output took the CLI from %d MiB to %d MiB: more than 64 MiB beyond its 16 KiB run", source, base>>20, large>>20)
		}
	}
}

// rusageArgsEnv makes the test binary a spawner that runs the command in
// it (JSON) and reports the command's peak RSS (see peakRSS).
const rusageArgsEnv = "AIRLOCK_TEST_RUSAGE_ARGS"

// peakRSS runs argv and returns its standard output and its peak RSS in
// bytes. A child's ru_maxrss counts the memory of the process it was
// spawned from (the address space it shared or copied until exec), so
// argv is started by a fresh copy of this test binary, small, rather
// than by this one, whose memory grows as tests run.
func peakRSS(t *testing.T, argv ...string) ([]byte, int64) {
	t.Helper()
	args, _ := json.Marshal(argv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), rusageArgsEnv+"="+string(args))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, errb.Bytes())
	}
	var rss int64
	if _, err := fmt.Sscanf(errb.String(), "maxrss %d", &rss); err != nil {
		t.Fatalf("%q: no peak RSS reported: %q", argv, errb.String())
	}
	return out.Bytes(), rss
}

// rusageMain is the spawner of peakRSS: it runs the command and writes
// "maxrss N" (bytes) on standard error, and nothing else there.
func rusageMain(spec string) int {
	var argv []string
	if err := json.Unmarshal([]byte(spec), &argv); err != nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "bad", rusageArgsEnv, err)
		return 2
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = os.Stdout
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, rusageArgsEnv+"=") })
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "maxrss %d\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss<<10)
	return 0
}

// TestExecJSONSupervisorMemory: a detached sandbox's supervisor answers
// an exec --json of 16 MiB of output with memory for the output and its
// base64, not for several copies of the result marshaled whole; and the
// CLI takes the output out of the response without decoding it into
// several copies either.
func TestExecJSONSupervisorMemory(t *testing.T) {
	t.Parallel()
	const big, small = 16 << 20, 16 << 10
	hwm := func(source string, n int) (supervisor, cli int64) {
		r := runCLI(t, nil, "run", "-d", "--timeout", "5m")
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || id == "" {
			t.Fatalf("run -d: exit %d, %q %q", r.code, r.stdout, r.stderr)
		}
		defer runCLI(t, nil, "rm", "-f", id)
		var rec struct {
			Supervisor struct{ PID int } `json:"supervisor"`
		}
		if err := json.Unmarshal([]byte(runCLI(t, nil, "get", id).stdout), &rec); err != nil || rec.Supervisor.PID == 0 {
			t.Fatalf("get %s: %v", id, err)
		}
		out, cli := peakRSS(t, cliBin, "exec", "--json", id, "--", "head", "-c", fmt.Sprint(n), source)
		var res jsonResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("exec --json of %d bytes of %s: %v", n, source, err)
		}
		b := []byte(res.Stdout)
		if res.StdoutEncoding == "base64" {
			b, _ = base64.StdEncoding.DecodeString(res.Stdout)
		}
		if len(b) != n {
			t.Fatalf("exec --json of %d bytes of %s: %d bytes back", n, source, len(b))
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", rec.Supervisor.PID))
		if err != nil {
			t.Fatal(err)
		}
		var kib int64
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				fmt.Sscan(rest, &kib)
			}
		}
		if kib == 0 {
			t.Fatalf("no VmHWM in the supervisor's status:\n%s", status)
		}
		return kib << 10, cli
	}
	for _, source := range []string{"/dev/zero", "/dev/urandom"} {
		base, baseCLI := hwm(source, small)
		large, largeCLI := hwm(source, big)
		t.Logf("%s: peak RSS of the supervisor %d MiB with 16 KiB of output, %d MiB with 16 MiB; of the CLI %d and %d MiB", source, base>>20, large>>20, baseCLI>>20, largeCLI>>20)
		// The output kept, its base64 in the response line, and garbage
		// collection's slack: at most six times the output, where
		// marshaling the result whole took ten.
		if large-base > 6*big {
			t.Errorf("%s: 16 MiB of output took the supervisor from %d MiB to %d MiB: more than 96 MiB beyond its 16 KiB run", source, base>>20, large>>20)
		}
		// The response line, the output decoded from it and the result
		// printed a piece at a time: at most four times the output,
		// where decoding the response whole took seven.
		if largeCLI-baseCLI > 4*big {
			t.Errorf("%s: 16 MiB of output took the CLI from %d MiB to %d MiB: more than 64 MiB beyond its 16 KiB run", source, baseCLI>>20, largeCLI>>20)
		}
	}
}
