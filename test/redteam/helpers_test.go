package redteam_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sleepMarker returns a unique argument for sleep(1), so that one
// process can be told apart from every other by its command line.
func sleepMarker(secs int) string {
	var n [6]byte
	_, _ = rand.Read(n[:])
	v := uint64(0)
	for _, b := range n {
		v = v<<8 | uint64(b)
	}
	return fmt.Sprintf("%d.%015d", secs, v%1e15)
}

// hostProcs lists the host's processes as pid -> NUL-separated cmdline.
func hostProcs(t *testing.T) map[int]string {
	t.Helper()
	out, err := testbin.HostProcs()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pyLibc opens a python program that calls libc directly, keeping errno.
const pyLibc = "import ctypes,os,sys; libc=ctypes.CDLL(None, use_errno=True)\n"

// pyErrno runs a python3 program that prints "<result> <errno>" and
// returns both numbers.
func pyErrno(t *testing.T, sb *airlock.Sandbox, prog string) (int64, syscall.Errno) {
	t.Helper()
	f := strings.Fields(py(t, sb, prog))
	if len(f) != 2 {
		t.Fatalf("python3 printed %q, want \"<result> <errno>\"", f)
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	e, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("python3 printed %q, want two numbers", f)
	}
	return r, syscall.Errno(e)
}

// refused checks that a call returned -1 with one of the errnos that
// mean the defence refused it.
func refused(t *testing.T, what string, r int64, e syscall.Errno, want ...syscall.Errno) {
	t.Helper()
	if r != -1 {
		t.Errorf("%s = %d, want it refused (%v)", what, r, want)
		return
	}
	for _, w := range want {
		if e == w {
			return
		}
	}
	t.Errorf("%s failed with %d (%v), want one of %v", what, int(e), e, want)
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }
