package client

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// fakeOptions runs this test binary as a fake `airlock rpc`.
func fakeOptions(mode string) Options {
	return Options{Binary: os.Args[0], Env: append(os.Environ(), envFakeRPC+"="+mode)}
}

func TestStartSubprocess(t *testing.T) {
	var logs bytes.Buffer
	opts := fakeOptions("serve")
	opts.Stderr = &logs
	c, err := Start(testCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(testCtx(t))
	if err != nil || info.Version != "fake" || info.Protocol != api.Version {
		t.Fatalf("Info: %+v, %v", info, err)
	}
	var got string
	if err := c.Call(testCtx(t), "echo", "hi", &got); err != nil || got != "hi" {
		t.Fatalf("Call: %q, %v", got, err)
	}
	// Larger than the server's max_message_bytes: refused before sending.
	err = c.Sandbox("").WriteFile(testCtx(t), "/f", make([]byte, 1<<20), 0)
	if !errors.Is(err, ErrLimitExceeded) {
		t.Errorf("WriteFile of 1 MiB: %v, want ErrLimitExceeded", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !strings.Contains(logs.String(), "stdin closed") {
		t.Errorf("server log %q: it did not see the end of stdin", logs.String())
	}
	if err := c.Call(testCtx(t), "echo", "hi", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Call after Close: %v, want ErrClosed", err)
	}
}

func TestStartSubprocessDies(t *testing.T) {
	_, err := Start(testCtx(t), fakeOptions("die"))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") ||
		!strings.Contains(err.Error(), "fatal: no sandbox backend here") {
		t.Fatalf("Start: %v, want the exit status and stderr", err)
	}
	t.Log(err)
}

func TestCloseKillsHungSubprocess(t *testing.T) {
	opts := fakeOptions("hang")
	opts.CloseTimeout = 300 * time.Millisecond
	c, err := Start(testCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Close()
	if err == nil || !strings.Contains(err.Error(), "killed it") {
		t.Errorf("Close: %v, want an error saying it was killed", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
}

func TestStartNoBinary(t *testing.T) {
	t.Setenv("AIRLOCK_BIN", "")
	t.Setenv("PATH", t.TempDir())
	_, err := Start(testCtx(t), Options{})
	if err == nil || !strings.Contains(err.Error(), "AIRLOCK_BIN") {
		t.Errorf("Start: %v, want advice on finding airlock", err)
	}
}
