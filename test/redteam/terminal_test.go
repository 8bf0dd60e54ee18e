package redteam_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
)

// hostileNames are file names, chosen in a sandbox, that would act on the
// user's terminal if airlock printed them raw: set the clipboard (OSC 52)
// or the title, clear the screen, with 7-bit escapes, C1 controls in
// UTF-8 and as raw bytes, and forge lines or reorder text.
var hostileNames = []string{
	"osc52-\x1b]52;c;SGVsbG8=\x07",
	"title-\x1b]0;pwned\x1b\\",
	"csi-\x1b[2J\x1b[H",
	"c1utf8-\xc2\x9b31m\xc2\x9d0;t\xc2\x9c",
	"c1raw-\x9b31m",
	"del-\x7f\x08\r",
	"bidi-\xe2\x80\xaeevil",
	"nl-\nairlock: forged line",
}

// terminalControl returns the first byte sequence in b that a terminal
// acts on, other than newline and tab: C0 controls, DEL, C1 controls in
// UTF-8 or as raw bytes, bidi overrides, line separators.
func terminalControl(b []byte) (string, bool) {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		bad := false
		switch {
		case r == utf8.RuneError && n == 1:
			bad = true
		case r == '\n' || r == '\t':
		case r < 0x20, r >= 0x7f && r <= 0x9f:
			bad = true
		case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			bad = true
		}
		if bad {
			lo := max(0, i-20)
			return fmt.Sprintf("%q at %q", b[i:i+n], b[lo:min(len(b), i+n+20)]), true
		}
		i += n
	}
	return "", false
}

// clean checks that what airlock itself printed carries nothing a
// terminal acts on.
func clean(t *testing.T, what string, r cliResult) {
	t.Helper()
	for _, out := range []struct {
		name string
		b    []byte
	}{{"stdout", r.stdout}, {"stderr", r.stderr}} {
		if c, bad := terminalControl(out.b); bad {
			t.Errorf("%s: its %s carries %s", what, out.name, c)
		}
		// A name with a newline must not forge a line of airlock's own.
		for line := range strings.Lines(string(out.b)) {
			if strings.HasPrefix(line, "airlock: forged line") {
				t.Errorf("%s: its %s has a line forged by a name: %q", what, out.name, line)
			}
		}
	}
}

// TestAttackTerminalEscapes: names and text chosen in a sandbox reach the
// user's terminal through airlock's own messages (cp's errors and
// warnings, errors relayed from the agent, list, get, --json) only as
// visible escapes; a command's own output passes through as it is.
func TestAttackTerminalEscapes(t *testing.T) {
	t.Parallel()
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		id := cliSandbox(t, lv)
		var hexNames []string
		for _, n := range hostileNames {
			hexNames = append(hexNames, hex.EncodeToString([]byte(n)))
		}
		// Each name as a file, as a symlink (cp skips those, naming
		// them) and as a directory whose path leads into /proc (which the
		// agent refuses, naming the path).
		py := fmt.Sprintf(`
import os
names = [bytes.fromhex(h) for h in %q.split()]
for d in (b"/workspace/t", b"/workspace/links", b"/workspace/procs"):
    os.makedirs(d, exist_ok=True)
for n in names:
    open(b"/workspace/t/" + n, "w").write("x")
    os.symlink(b"/proc/self", b"/workspace/links/" + n)
    os.symlink(b"/proc/self", b"/workspace/procs/" + n)
`, strings.Join(hexNames, " "))
		if r := airlockCLI(t, -1, "exec", id, "--", "python3", "-c", py); r.code != 0 {
			t.Fatalf("plant the names: %s", r.stderr)
		}
		dest := t.TempDir()
		payload := filepath.Join(t.TempDir(), "payload")
		os.WriteFile(payload, []byte("x"), 0o644)
		for i, n := range hostileNames {
			for _, args := range [][]string{
				{"cp", id + ":/workspace/t/" + n, filepath.Join(dest, "missing", "dir", "x")},   // destination missing
				{"cp", id + ":/workspace/t/" + n + "-gone", filepath.Join(dest, fmt.Sprint(i))}, // source missing
				{"cp", id + ":/workspace/procs/" + n + "/environ", filepath.Join(dest, "p")},    // refused by the agent
				{"cp", payload, id + ":/workspace/procs/" + n + "/x"},                           // refused, inward
				{"cp", id + ":/workspace/t/" + n, id + ":/x"},                                   // both remote
				{"exec", id, "--", "/workspace/" + n},                                           // not found
				{"exec", id, "--", n},                                                           // not found, on PATH
			} {
				if args[0] == "cp" && strings.HasSuffix(args[2], "/x") && !utf8.ValidString(n) {
					// JSON-RPC carries the name with U+FFFD for the
					// byte: a new directory, not the link.
					continue
				}
				r := airlockCLI(t, -1, args...)
				if r.code == 0 {
					t.Errorf("airlock %q succeeded", args)
				}
				clean(t, fmt.Sprintf("airlock %q", args), r)
			}
		}
		// A tree copy makes every link again, as a link, and says
		// nothing a terminal would act on.
		r := airlockCLI(t, -1, "cp", id+":/workspace/links", filepath.Join(dest, "links"))
		if r.code != 0 {
			t.Errorf("cp of a tree of links: exit %d, stderr:\n%s", r.code, r.stderr)
		}
		clean(t, "cp of a tree of links", r)
		if ents, err := os.ReadDir(filepath.Join(dest, "links")); err != nil {
			t.Errorf("cp of a tree of links: %v", err)
		} else {
			links := 0
			for _, e := range ents {
				if e.Type()&os.ModeSymlink != 0 {
					links++
				}
			}
			if links != len(hostileNames) {
				t.Errorf("cp of a tree of links made %d links of %d", links, len(hostileNames))
			}
		}
		// The names land on the host as they are (they are names, not
		// text printed to a terminal).
		r = airlockCLI(t, -1, "cp", id+":/workspace/t", filepath.Join(dest, "t"))
		clean(t, "cp of a tree of hostile names", r)
		if _, err := os.Stat(filepath.Join(dest, "t", hostileNames[0])); err != nil {
			t.Errorf("the file %q was not copied out as named: %v", hostileNames[0], err)
		}

		// --json carries the names, escaped, and they decode as they are.
		r = airlockCLI(t, -1, "exec", "--json", id, "--", "ls", "/workspace/t")
		clean(t, "exec --json", r)
		var out struct {
			Stdout         string `json:"stdout"`
			StdoutEncoding string `json:"stdout_encoding"`
		}
		if err := json.Unmarshal(r.stdout, &out); err != nil {
			t.Fatalf("exec --json: %v\n%s", err, r.stdout)
		}
		if out.StdoutEncoding == "" {
			for _, n := range hostileNames {
				if utf8.ValidString(n) && !strings.Contains(n, "\n") && !strings.Contains(out.Stdout, n) {
					t.Errorf("exec --json: %q is not in the decoded output %q", n, out.Stdout)
				}
			}
		}
		r = airlockCLI(t, -1, "run", "--isolation", string(lv), "--json", "--", "printf", strings.Join(hostileNames, "|"))
		clean(t, "run --json", r)

		// list, list --json and get of a sandbox whose command holds them.
		other := cliSandbox(t, lv, "sh", "-c", "sleep 600 # "+strings.Join(hostileNames, " "))
		for _, args := range [][]string{{"list"}, {"list", "--json"}, {"get", other}, {"list", "-q"}} {
			clean(t, fmt.Sprintf("airlock %q", args), airlockCLI(t, -1, args...))
		}

		// A command's own output passes through as it is, as docker's
		// does: the user asked for it.
		r = airlockCLI(t, -1, "exec", id, "--", "printf", "\x1b]0;own output\x07")
		if r.code != 0 || !bytes.Equal(r.stdout, []byte("\x1b]0;own output\x07")) {
			t.Errorf("a command's own output: %q (exit %d), want it as it is", r.stdout, r.code)
		}
	})
}
