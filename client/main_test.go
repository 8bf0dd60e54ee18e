package client

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// envFakeRPC turns the test binary into a fake `airlock rpc` (see
// fakeRPCMain); its value selects the behaviour.
const envFakeRPC = "AIRLOCK_CLIENT_TEST_FAKE_RPC"

// realBin is the directory holding the airlock and airlock-guest binaries
// built from this module, or "" if the build failed (buildErr says why).
var (
	realBin  string
	buildErr error
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envFakeRPC); mode != "" {
		os.Exit(fakeRPCMain(mode))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	dir, err := testbin.Dir("airlock-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	buildErr = buildAirlock(dir)
	if buildErr == nil {
		realBin = dir
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "TestMain:", err)
		return 2
	}
	os.Setenv("AIRLOCK_HOME", home)
	return m.Run()
}

// buildAirlock builds the CLI and the agent into dir, unless the
// integration tests are skipped anyway.
func buildAirlock(dir string) error {
	if testing.Short() {
		return fmt.Errorf("-short")
	}
	_, err := testbin.Build(dir, "airlock", "airlock-guest")
	return err
}

// fakeRPCMain is a minimal `airlock rpc` on stdin/stdout:
//
//	serve: answers info (protocol 1) and echoes params of other methods;
//	       exits 0 at the end of stdin
//	die:   writes to stderr and exits 3 without reading
//	hang:  like serve but ignores the end of stdin
func fakeRPCMain(mode string) int {
	switch mode {
	case "die":
		fmt.Fprintln(os.Stderr, "starting")
		fmt.Fprintln(os.Stderr, "fatal: no sandbox backend here")
		return 3
	case "serve", "hang":
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 2
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			return 2
		}
		result := req.Params
		if req.Method == "info" {
			result = json.RawMessage(`{"version":"fake","protocol":1,"max_message_bytes":1048576,"sandboxes":[]}`)
		}
		fmt.Fprintf(os.Stdout, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", req.ID, result)
	}
	fmt.Fprintln(os.Stderr, "stdin closed")
	if mode == "hang" {
		time.Sleep(time.Hour)
	}
	return 0
}
