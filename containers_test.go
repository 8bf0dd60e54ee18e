package airlock_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestContainers runs two containers in one sandbox, each on a root of
// its own made in the sandbox, as a pod's containers share one sandbox:
// each sees its own root and a volume they share, not the sandbox's files
// nor each other's processes; a symlink in a root does not lead a bind
// out of it; removing a container kills its processes and refuses its
// commands.
func TestContainers(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("needs the host's busybox to make the containers' roots")
	}
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, 2*time.Minute)
		sb := newSandbox(t, airlock.Config{Isolation: lv})
		// Two roots of busybox. c2's /escape is a symlink out of its
		// root (absolute, as in the sandbox it leads elsewhere), and
		// /link one to its own /data: a bind through /link lands in
		// /data, and one through /escape is refused, not made in the
		// sandbox's /workspace/sandbox-only.
		mustRun(t, ctx, sb, `set -e
for c in c1 c2; do
  mkdir -p /workspace/$c/bin /workspace/shared
  cp /bin/busybox /workspace/$c/bin/
  for a in sh cat ls echo sleep ps readlink test; do ln -s busybox /workspace/$c/bin/$a; done
  echo "root of $c" > /workspace/$c/marker
done
ln -s /workspace/sandbox-only /workspace/c2/escape
ln -s /data /workspace/c2/link
mkdir /workspace/sandbox-only /workspace/c2/data
echo sandbox > /workspace/sandbox-file`)
		for _, c := range []string{"c1", "c2"} {
			spec := airlock.ContainerSpec{Root: "/workspace/" + c, Binds: []airlock.ContainerBind{{Source: "/workspace/shared", Target: "/shared"}}}
			if c == "c2" {
				escape := spec
				escape.Binds = append(escape.Binds, airlock.ContainerBind{Source: "/workspace/shared", Target: "/escape/in"})
				if err := sb.AddContainer(ctx, c, escape); err == nil {
					t.Fatalf("a bind through a symlink out of the root was made")
				}
				spec.Binds = append(spec.Binds, airlock.ContainerBind{Source: "/workspace/shared", Target: "/link/in", ReadOnly: true})
			}
			if err := sb.AddContainer(ctx, c, spec); err != nil {
				t.Fatalf("add %s: %v", c, err)
			}
		}
		in := func(c, line string) string {
			t.Helper()
			res, err := sb.Run(ctx, airlock.Command{Argv: []string{"/bin/sh", "-c", line}, Container: c})
			if err != nil {
				t.Fatalf("exec in %s: %v", c, err)
			}
			if res.ExitCode != 0 {
				t.Fatalf("exec %q in %s: exit %d\n%s%s", line, c, res.ExitCode, res.Stdout, res.Stderr)
			}
			return string(res.Stdout)
		}
		if got := in("c1", "cat /marker; test -e /workspace || echo no-workspace; test -e /usr || echo no-usr; pwd; echo written by c1 > /shared/note"); got != "root of c1\nno-workspace\nno-usr\n/\n" {
			t.Errorf("c1 sees:\n%s", got)
		}
		if got := in("c2", "cat /marker /shared/note; ls /data/in"); got != "root of c2\nwritten by c1\nnote\n" {
			t.Errorf("c2 sees:\n%s", got)
		}
		if got := mustRun(t, ctx, sb, "ls -A /workspace/sandbox-only"); got != "" {
			t.Errorf("the refused bind made %q in the sandbox", got)
		}
		if res, err := sb.Run(ctx, airlock.Command{Argv: []string{"/bin/sh", "-c", "echo x > /data/in/y"}, Container: "c2"}); err != nil || res.ExitCode == 0 {
			t.Errorf("a write to c2's read-only bind: exit %d, %v", res.ExitCode, err)
		}
		// Each container's processes are its own.
		p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "300"}, Container: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := in("c2", "ps -o comm | grep -c sleep || true"); strings.TrimSpace(got) != "0" {
			t.Errorf("c2 sees c1's sleep: %q", got)
		}
		if got := in("c1", "ps -o pid,comm | grep sleep"); !strings.Contains(got, "sleep") {
			t.Errorf("c1 does not see its own sleep: %q", got)
		}
		if err := sb.RemoveContainer(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		waited := make(chan *airlock.ExecResult, 1)
		go func() {
			res, _ := p.Wait()
			waited <- res
		}()
		select {
		case res := <-waited:
			if res != nil && res.Signal == 0 && res.ExitCode == 0 {
				t.Errorf("c1's sleep after its container was removed: %+v", res)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("c1's sleep outlived its container")
		}
		if _, err := sb.Run(ctx, airlock.Command{Argv: []string{"true"}, Container: "c1"}); err == nil {
			t.Errorf("a command in a removed container ran")
		}
		if err := sb.AddContainer(ctx, "c2", airlock.ContainerSpec{Root: "/workspace/c2"}); err == nil {
			t.Errorf("a second container c2 was added")
		}
		if err := sb.AddContainer(ctx, "bad/name", airlock.ContainerSpec{Root: "/workspace/c2"}); err == nil {
			t.Errorf("a container named bad/name was added")
		}
		// The sandbox's own commands are as they were.
		if got := mustRun(t, ctx, sb, "cat /workspace/sandbox-file"); got != "sandbox\n" {
			t.Errorf("the sandbox's own file: %q", got)
		}
	})
}
