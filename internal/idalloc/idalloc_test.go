package idalloc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/state"
)

// Environment of a child that allocates: the registry, how many leases
// of how many ids each, and from how many goroutines.
const (
	envChildDir   = "AIRLOCK_IDALLOC_CHILD_DIR"
	envChildSpec  = "AIRLOCK_IDALLOC_CHILD_SPEC" // "leases count goroutines"
	childFirst    = 100_000
	childRegistry = 4096
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envChildDir); dir != "" {
		os.Exit(allocChild(dir, os.Getenv(envChildSpec)))
	}
	os.Exit(m.Run())
}

// allocChild allocates as the spec says, prints "first count" per lease,
// then holds them until its standard input ends.
func allocChild(dir, spec string) int {
	var n, count, workers int
	if _, err := fmt.Sscan(spec, &n, &count, &workers); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r, err := Open(dir, childFirst, childRegistry)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	owner, err := Self("child")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := false
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				l, err := r.Allocate(context.Background(), owner, uint32(count))
				mu.Lock()
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed = true
				} else {
					fmt.Printf("%d %d\n", l.First, l.Count)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Println("done")
	// Hold every lease until the parent has read all children: a child
	// that exits early gives its ids back, to be handed out again.
	_, _ = io.Copy(io.Discard, os.Stdin)
	if failed {
		return 1
	}
	return 0
}

func self(t *testing.T, id string) Owner {
	t.Helper()
	o, err := Self(id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestParseLease(t *testing.T) {
	s := state.Supervisor{PID: 4242, StartTime: 987654}
	for _, c := range []struct{ first, count uint32 }{{0, 1}, {1_000_000_000, 1}, {65536, 65536}, {1_000_000_000 + 32767*65536, 65536}, {1<<32 - 2, 1}} {
		name := leaseName(c.first, c.count, s)
		l, ok := parseLease(name)
		if !ok || l.first != c.first || l.count != c.count || l.holder != s || l.name != name {
			t.Errorf("parseLease(%q) = %+v, %v", name, l, ok)
		}
	}
	for _, bad := range []string{"", "lock", "1+1", "1+1@2", "1+0@2.3", "1+1@0.3", "1+1@-2.3", "+1@2.3", "01+1@2.3",
		"1+1@2.3.4", "4294967295+1@2.3", "4294967294+2@2.3", "4294967296+1@2.3", "1 +1@2.3", "1+1@2.3\n", ".1+1@2.3", "1+1@2.3x"} {
		if l, ok := parseLease(bad); ok {
			t.Errorf("parseLease(%q) = %+v, want not a lease", bad, l)
		}
	}
}

func TestOverlaps(t *testing.T) {
	live := []lease{{first: 10, count: 1}, {first: 20, count: 10}, {first: 22, count: 1}, {first: 40, count: 4}}
	for _, c := range []struct {
		first, end uint64
		want       bool
	}{
		{0, 10, false}, {10, 11, true}, {11, 20, false}, {9, 11, true},
		{29, 30, true}, {30, 31, false}, {25, 26, true}, {30, 40, false},
		{43, 44, true}, {44, 100, false}, {0, 100, true},
	} {
		if got := overlaps(live, 10, c.first, c.end); got != c.want {
			t.Errorf("overlaps([%d, %d)) = %v, want %v", c.first, c.end, got, c.want)
		}
	}
}

func TestAllocateUntilFull(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "ids"), 500, 8)
	if err != nil {
		t.Fatal(err)
	}
	owner := self(t, "sb-test")
	seen := map[uint32]*Lease{}
	for range 8 {
		l, err := r.Allocate(context.Background(), owner, 1)
		if err != nil {
			t.Fatal(err)
		}
		if l.First < 500 || l.First >= 508 || l.Count != 1 {
			t.Fatalf("lease %d+%d is outside [500, 508)", l.First, l.Count)
		}
		if seen[l.First] != nil {
			t.Fatalf("id %d handed out twice", l.First)
		}
		seen[l.First] = l
	}
	if _, err := r.Allocate(context.Background(), owner, 1); err == nil || !strings.Contains(err.Error(), "held by running sandboxes") {
		t.Fatalf("a ninth lease of eight ids: %v", err)
	}
	if err := seen[503].Release(); err != nil {
		t.Fatal(err)
	}
	if err := seen[503].Release(); err != nil {
		t.Errorf("a second release: %v", err)
	}
	l, err := r.Allocate(context.Background(), owner, 1)
	if err != nil || l.First != 503 {
		t.Fatalf("after a release: %+v, %v; want id 503", l, err)
	}
	b, err := os.ReadFile(filepath.Join(r.dir, l.name))
	if err != nil || string(b) != "sb-test\n" {
		t.Errorf("the lease file holds %q (%v), want the sandbox id", b, err)
	}
}

func TestAllocateBlocks(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "ids"), 1<<16, 1<<9)
	if err != nil {
		t.Fatal(err)
	}
	owner := self(t, "sb-test")
	// Blocks of 64 are aligned; single ids fill the gaps around them.
	var leases []*Lease
	for range 2 {
		l, err := r.Allocate(context.Background(), owner, 64)
		if err != nil {
			t.Fatal(err)
		}
		if (l.First-1<<16)%64 != 0 || l.Count != 64 {
			t.Fatalf("block %d+%d is not aligned to 64", l.First, l.Count)
		}
		leases = append(leases, l)
	}
	for range 1<<9 - 2*64 {
		l, err := r.Allocate(context.Background(), owner, 1)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	used := map[uint32]bool{}
	for _, l := range leases {
		for id := l.First; id < l.First+l.Count; id++ {
			if used[id] {
				t.Fatalf("id %d is in two leases", id)
			}
			used[id] = true
		}
	}
	for _, count := range []uint32{1, 64} {
		if _, err := r.Allocate(context.Background(), owner, count); err == nil {
			t.Errorf("a block of %d fitted in a full registry", count)
		}
	}
	for _, count := range []uint32{0, 1<<9 + 1} {
		if _, err := r.Allocate(context.Background(), owner, count); err == nil {
			t.Errorf("a block of %d ids was allocated", count)
		}
	}
}

// TestReclaimDead allocates for a process that then dies: its lease is
// taken back by the next allocation, and only then.
func TestReclaimDead(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "ids"), 7000, 1)
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := state.ProcessStartTime(holder.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	dead := Owner{Sandbox: "sb-dead", Supervisor: state.Supervisor{PID: holder.Process.Pid, StartTime: start}}
	l, err := r.Allocate(context.Background(), dead, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Allocate(context.Background(), self(t, "sb-live"), 1); err == nil {
		t.Fatal("the only id was handed out while its holder lives")
	}
	holder.Process.Kill()
	holder.Wait()
	if _, err := r.Allocate(context.Background(), dead, 1); err == nil {
		t.Error("a lease was made for a dead holder")
	}
	l2, err := r.Allocate(context.Background(), self(t, "sb-live"), 1)
	if err != nil || l2.First != 7000 {
		t.Fatalf("after its holder died: %+v, %v; want id 7000 back", l2, err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, l.name)); !os.IsNotExist(err) {
		t.Errorf("the dead holder's lease file is still there: %v", err)
	}
	// The dead holder releasing late changes nothing.
	if err := l.Release(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, l2.name)); err != nil {
		t.Errorf("the live lease is gone: %v", err)
	}
}

// TestConcurrentAllocations has several processes, each from several
// goroutines, allocate ids and blocks from one registry at once, holding
// them all: no id is handed out twice.
func TestConcurrentAllocations(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ids")
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	var children []child
	specs := []string{"60 1 4", "60 1 4", "60 1 4", "60 1 4", "60 1 4", "10 8 2", "10 8 2", "10 16 2"}
	for _, spec := range specs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChildDir+"="+dir, envChildSpec+"="+spec, "GORACE=atexit_sleep_ms=0")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, child{cmd, stdin, bufio.NewScanner(stdout)})
	}
	used := map[uint64]string{}
	total := 0
	for i, c := range children {
		for c.out.Scan() {
			line := c.out.Text()
			if line == "done" {
				break
			}
			f := strings.Fields(line)
			first, err1 := strconv.ParseUint(f[0], 10, 32)
			count, err2 := strconv.ParseUint(f[1], 10, 32)
			if len(f) != 2 || err1 != nil || err2 != nil {
				t.Fatalf("child %d printed %q", i, line)
			}
			if first < childFirst || first+count > childFirst+childRegistry || (first-childFirst)%count != 0 {
				t.Errorf("child %d got %d+%d, outside the registry or not aligned", i, first, count)
			}
			for id := first; id < first+count; id++ {
				if prev, ok := used[id]; ok {
					t.Errorf("id %d handed out twice: to %s and to child %d", id, prev, i)
				}
				used[id] = fmt.Sprintf("child %d", i)
			}
			total++
		}
	}
	for i, c := range children {
		c.stdin.Close()
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("child %d (%s): %v", i, specs[i], err)
		}
	}
	if total != 5*60+2*10+10 {
		t.Errorf("%d leases made, want %d", total, 5*60+2*10+10)
	}
}

// TestAllocateWaitsForLock holds the registry's lock: an allocation waits
// for it no longer than its context allows, and goes on once it is free.
func TestAllocateWaitsForLock(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "ids"), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	unlock, err := lock(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Allocate(ctx, self(t, "sb"), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("allocate while the lock is held: %v, want the context's end", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Allocate(context.Background(), self(t, "sb"), 1)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("allocate once the lock is free: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(dir, "file"), 0, 1); err == nil {
		t.Error("a file opened as a registry")
	}
	if err := os.Symlink(dir, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(dir, "link"), 0, 1); err == nil {
		t.Error("a symbolic link opened as a registry")
	}
	for _, c := range []struct{ first, size uint32 }{{0, 0}, {1<<32 - 1, 1}, {1<<32 - 2, 2}, {1 << 31, 1 << 31}} {
		if _, err := Open(filepath.Join(dir, "ids"), c.first, c.size); err == nil {
			t.Errorf("registry [%d, +%d) opened", c.first, c.size)
		}
	}
	// A registry made by a permissive umask, or by hand, is made private.
	if err := os.Mkdir(filepath.Join(dir, "ids"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Open(filepath.Join(dir, "ids"), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(r.dir); err != nil || fi.Mode().Perm() != dirPerm {
		t.Errorf("registry mode %v (%v), want %v", fi.Mode().Perm(), err, os.FileMode(dirPerm))
	}
}

// TestSandboxRange fills the registry that sandboxes use under root (a
// block of 65536 ids each from [1e9, 1e9+2^31)) but for one block, with
// a lease that spans all the others and one single id: the next
// allocation finds the free block, aligned and below (uid_t)-1, and the
// one after is refused with the count of blocks.
func TestSandboxRange(t *testing.T) {
	const first, size, block = 1_000_000_000, 1 << 31, 65536
	r, err := Open(filepath.Join(t.TempDir(), "ids"), first, size)
	if err != nil {
		t.Fatal(err)
	}
	owner := self(t, "sb-test")
	const blocks = size / block
	for _, name := range []string{
		leaseName(first, (blocks-2)*block, owner.Supervisor),     // all blocks but the last two
		leaseName(first+(blocks-1)*block-1, 1, owner.Supervisor), // the last id of the one before the last
	} {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte("sb-held\n"), filePerm); err != nil {
			t.Fatal(err)
		}
	}
	l, err := r.Allocate(context.Background(), owner, block)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint32(first + (blocks-1)*block); l.First != want || l.Count != block {
		t.Errorf("allocated %d+%d, want the free block %d+%d", l.First, l.Count, want, block)
	}
	if end := uint64(l.First) + uint64(l.Count); end > 1<<32-1 {
		t.Errorf("the block ends at %d, past the last id 2^32-2", end-1)
	}
	_, err = r.Allocate(context.Background(), owner, block)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("all %d blocks of %d ids", blocks, block)) {
		t.Errorf("allocation from a full registry: %v, want a refusal naming its %d blocks", err, blocks)
	}
}
