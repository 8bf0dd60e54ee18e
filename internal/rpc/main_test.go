package rpc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// testEnv is what the tests that start sandboxes share: the agent binary,
// built once, and the state directory.
var testEnv struct {
	once     sync.Once
	dir      string
	agent    string
	buildErr error
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := testbin.Dir("airlock-rpc-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_HOME", home)
	testEnv.dir = dir
	return m.Run()
}

// needAgent builds the agent the first time a test needs sandboxes.
func needAgent(t testing.TB) {
	t.Helper()
	testEnv.once.Do(func() {
		bins, err := testbin.Build(testEnv.dir, "airlock-guest")
		if err != nil {
			testEnv.buildErr = err
			return
		}
		testEnv.agent = bins[0]
		os.Setenv("AIRLOCK_AGENT", testEnv.agent)
	})
	if testEnv.buildErr != nil {
		t.Fatal(testEnv.buildErr)
	}
}

// created records the sandboxes a test's server created.
type created struct {
	mu  sync.Mutex
	sbs []*airlock.Sandbox
}

func (c *created) create(ctx context.Context, cfg airlock.Config) (*airlock.Sandbox, error) {
	sb, err := airlock.Create(ctx, cfg)
	if err == nil {
		c.mu.Lock()
		c.sbs = append(c.sbs, sb)
		c.mu.Unlock()
	}
	return sb, err
}

func (c *created) list() []*airlock.Sandbox {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*airlock.Sandbox(nil), c.sbs...)
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
