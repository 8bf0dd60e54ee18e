package cli

import (
	"regexp"
	"strings"
	"testing"
)

// rpcVocabulary matches what a CLI user must never be told to use: method
// names, params and JSON-RPC error codes.
var rpcVocabulary = regexp.MustCompile(`policy\.(get|allow|deny|remove)|list_files|read_file|write_file|exec_stream|set_attr|events\.|allowed_hosts|denied_hosts|max_bytes|disk_mb|working_dir|recursive true| params:|\(code -?\d+\)|call create|RPC method|airlock (stat|exec|mkdir|remove|create|stats):`)

func TestCLIWords(t *testing.T) {
	w := newCLIWording()
	for in, want := range map[string]string{
		`airlock stat: stat "/x": no such file: check the path (list_files shows what exists) (code -32006)`: `stat "/x": no such file: check the path (ls in the sandbox shows what exists)`,
		`policy.remove: "a.b" is in neither allowed_hosts nor denied_hosts: policy.get lists them`:           `"a.b" is in neither the allowed nor the denied hosts: airlock policy ID lists them`,
		`policy.allow params: "host": bad`:                                                             `"host": bad`,
		`this session has no sandbox: call create first`:                                               `this session has no sandbox: start one with airlock run -d`,
		`sandbox sb-1: sandbox is paused: resume it first (airlock unpause, or the RPC method resume)`: `sandbox sb-1: sandbox is paused: unpause it first (airlock unpause ID)`,
		`a stat of the file: exec of it`:                                                               `a stat of the file: exec of it`, // plain words stay
		`the sandbox's disk is full: free space, or create the sandbox with a larger disk_mb`:          `the sandbox's disk is full: free space, or start the sandbox with a larger --disk`,
	} {
		if got := w.words(in); got != want {
			t.Errorf("%q:\n got %q\nwant %q", in, got, want)
		}
	}
}

// TestCLIErrorsInCLIWords: what the CLI says when a call through a control
// socket fails names CLI commands and flags, never JSON-RPC methods.
func TestCLIErrorsInCLIWords(t *testing.T) {
	t.Parallel()
	h := newCLIHome(t)
	id := strings.TrimSpace(h.must(nil, "run", "-d", "--allow-host", "example.com"))
	bare := strings.TrimSpace(h.must(nil, "run", "-d", "--disk", "8m"))
	h.must(nil, "exec", id, "--", "mkdir", "/tmp/d")
	for _, args := range [][]string{
		{"policy", id, "remove", "nope.example.com"},
		{"policy", id, "allow", "bad host"},
		{"policy", bare},
		{"cp", id + ":/nonexistent", t.TempDir()},
		{"cp", id + ":/proc/1/status", t.TempDir()},
		{"exec", id, "--", "nosuchprogram"},
		{"exec", "-u", "nosuchuser", id, "--", "true"},
		{"exec", "-w", "/nonexistent", id, "--", "true"},
		{"cp", "/etc/hostname", id + ":/proc/x"},
		{"cp", "/etc/hostname", id + ":/usr/bin/x"},
		{"exec", "nosuchsandbox", "--", "true"},
	} {
		r := h.run(nil, args...)
		if r.code == 0 {
			t.Errorf("airlock %q succeeded", args)
			continue
		}
		if m := rpcVocabulary.FindString(r.stderr); m != "" {
			t.Errorf("airlock %q says %q:\n%s", args, m, r.stderr)
		}
	}
	// A file too large for a full disk.
	r := h.run(nil, "exec", bare, "--", "sh", "-c", "head -c 20m /dev/zero > /tmp/big")
	if r.code == 0 {
		t.Errorf("20 MiB on an 8 MiB disk succeeded")
	}
	if m := rpcVocabulary.FindString(r.stderr); m != "" {
		t.Errorf("full disk says %q:\n%s", m, r.stderr)
	}
}
