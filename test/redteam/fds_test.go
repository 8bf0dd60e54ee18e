//go:build linux

package redteam_test

import (
	"encoding/json"
	"os"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestAttackDescriptorsNotInherited leaks descriptors into the supervisor as a
// careless launcher would (a host directory and a pipe, not marked
// close-on-exec) and lists, from inside a sandbox, every descriptor its
// processes hold: commands get their standard streams and nothing else:
// none of the launcher's, not the agent binary opened on the host, not
// the spawner's socket to the agent.
func TestAttackDescriptorsNotInherited(t *testing.T) {
	dirFD, err := syscall.Open(os.TempDir(), syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dirFD)
	var pipe [2]int
	if err := syscall.Pipe(pipe[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pipe[0])
	defer syscall.Close(pipe[1])

	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		sb := box(t, lv, airlock.Config{})
		// A command started without a shell, and one a shell started.
		for _, prog := range []string{"python3 -c", "sh -c 'exec python3 -c \"$0\"'"} {
			out := ok(t, sb, prog+` '
import json, os
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        pass  # the listing itself, closed by now
print(json.dumps(fds))'`)
			var fds map[string]string
			if err := json.Unmarshal([]byte(out), &fds); err != nil {
				t.Fatalf("%s: %q: %v", prog, out, err)
			}
			for fd, target := range fds {
				if fd != "0" && fd != "1" && fd != "2" {
					t.Errorf("%s: a command holds descriptor %s -> %s, beyond its standard streams", prog, fd, target)
				}
			}
		}
	})
}
