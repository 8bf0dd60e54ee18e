package agent

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// A process list fits the spawner's message whatever runs: long command
// lines are cut, and what does not fit is counted, not sent.
func TestListProcessesBounded(t *testing.T) {
	// sleep sums its arguments: 1000 and 400 zeros, a command line of
	// 800 bytes.
	args := append([]string{"1000"}, strings.Fields(strings.Repeat("0 ", 400))...)
	var cmds []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	for range 150 {
		c := exec.Command("sleep", args...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	procs, more := listProcesses(os.Getpid())
	if more == 0 {
		t.Errorf("%d processes listed, none left out, with 150 command lines of 800 bytes", len(procs))
	}
	b, err := cbor.Marshal(zmsg{Op: "ps", ID: 1, Procs: procs, More: more})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 60<<10 {
		t.Errorf("the reply takes %d bytes, more than the spawner's reader takes", len(b))
	}
	seen := 0
	for _, p := range procs {
		if p.PID == os.Getpid() {
			t.Errorf("the lister listed itself: %+v", p)
		}
		n := 0
		for _, a := range p.Command {
			n += len(a)
		}
		if n > agentproto.MaxProcessCommand || len(p.Command) == 0 {
			t.Errorf("pid %d: a command of %d bytes: %q", p.PID, n, p.Command)
		}
		for _, c := range cmds {
			if c.Process.Pid == p.PID {
				seen++
				if p.Command[0] != "sleep" || p.Command[1] != "1000" {
					t.Errorf("pid %d: %q", p.PID, p.Command)
				}
			}
		}
	}
	if seen == 0 {
		t.Error("none of the test's processes is listed")
	}
}
