package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestProgramName: a program built on the package names itself, not
// airlock, in its usage lines and in the command lines its help shows.
func TestProgramName(t *testing.T) {
	t.Parallel()
	root := newApp(Options{Name: "my-sandbox", Short: "my own sandbox"}).newRootCmd()
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"exec", "--help"}, {"policy", "--help"}} {
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		help := out.String()
		if !strings.Contains(help, "my-sandbox ") {
			t.Errorf("%q: the help does not name my-sandbox:\n%s", args, help)
		}
		for _, sub := range []string{"run", "exec", "policy", "rpc", "kill"} {
			if strings.Contains(help, "airlock "+sub) {
				t.Errorf("%q: the help shows airlock %s:\n%s", args, sub, help)
			}
		}
	}
}

// TestExtraCommands: a program's own commands run beside airlock's, and
// Exit sets the exit code.
func TestExtraCommands(t *testing.T) {
	t.Parallel()
	ran := false
	o := Options{Name: "my-sandbox", Commands: func() []*cobra.Command {
		return []*cobra.Command{{
			Use: "hello",
			RunE: func(*cobra.Command, []string) error {
				ran = true
				return Exit(3)
			},
		}}
	}}
	if code := o.Run(context.Background(), []string{"hello"}); code != 3 || !ran {
		t.Errorf("hello: exit %d, ran %v; want 3, true", code, ran)
	}
	if code := o.Run(context.Background(), []string{"no-such-command"}); code != 125 {
		t.Errorf("an unknown command: exit %d, want 125", code)
	}
}

// A command cobra does not know is reported on one line with its
// suggestions, not with escaped line breaks.
func TestUnknownCommandOneLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"unknown command \"stpo\" for \"airlock\"\n\nDid you mean this?\n\tstop\n", `unknown command "stpo" for "airlock"; did you mean stop?`},
		{"unknown command \"top\" for \"airlock\"\n\nDid you mean this?\n\tcp\n\tstop\n", `unknown command "top" for "airlock"; did you mean cp or stop?`},
		{"unknown command \"x\" for \"airlock\"", `unknown command "x" for "airlock"`},
		{"unknown command \"imgae\" for \"airlock\"\n\nDid you mean this?\n\timage\n\timage\n", `unknown command "imgae" for "airlock"; did you mean image?`},
		{"a file named\nairlock: forged", "a file named\nairlock: forged"},
	} {
		if got := oneLine(c.in); got != c.want {
			t.Errorf("oneLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestFlagValueErrors: a bad number or boolean for a flag is said in the
// user's words, naming the flag and the value, in every command.
func TestFlagValueErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--cpus", "abc", "--", "true"}, `airlock: --cpus: "abc" is not a number`},
		{[]string{"run", "--pids-limit", "99999999999999999999", "--", "true"}, `airlock: --pids-limit: "99999999999999999999" is out of range`},
		{[]string{"run", "--rm=maybe", "--", "true"}, `airlock: --rm: "maybe" is not true or false`},
		{[]string{"logs", "--tail", "x", "nobody"}, `airlock: --tail: "x" is not a number`},
	} {
		r := runCLI(t, nil, c.args...)
		if r.code == 0 || strings.TrimSpace(r.stderr) != c.want {
			t.Errorf("%q: exit %d, stderr %q; want %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
