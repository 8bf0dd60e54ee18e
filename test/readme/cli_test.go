package readme_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// TestReadmeCLILines runs every line of README.md's CLI section as a
// shell runs it, in a directory holding what the lines name (a Makefile,
// ./agent, ./myroot), with the built airlock first on PATH: each must
// succeed. Lines that need what this machine has not are said so: the
// internet (pip download), a terminal (-it: the CLI's own tests drive a
// real one), and the standard image when the test image cache is not
// given (make test gives it).
func TestReadmeCLILines(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the README's sandboxes with limits and networks do")
	}
	dir, err := testbin.Dir("readme-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bins := filepath.Join(dir, "bin")
	if err := os.Mkdir(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := testbin.Build(bins, "airlock", "airlock-guest"); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	root := filepath.Join(work, "myroot")
	for _, d := range []string{work, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"Makefile":              "all:\n\t@echo made\n",
		"agent":                 "#!/bin/sh\ncase \"$API_KEY\" in *readme-secret*) echo leaked; exit 1;; esac\necho agent ran\n",
		"myroot/etc/os-release": "NAME=myroot\n",
	}
	for name, body := range files {
		p := filepath.Join(work, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := testbin.ToolRoot(root, "cat"); err != nil {
		t.Fatal(err)
	}
	cache := os.Getenv("AIRLOCK_TEST_IMAGE_CACHE")
	ran := 0
	for _, line := range commandLines(blockAfter(t, "### CLI", "sh")) {
		switch {
		case strings.Contains(line, "pip download"):
			t.Logf("not run (needs the internet): %s", line)
			continue
		case strings.Contains(line, " -it "):
			t.Logf("not run here (needs a terminal; cli's TTY tests drive one): %s", line)
			continue
		case strings.Contains(line, "--image standard") && cache == "":
			t.Logf("not run (needs the standard image: set AIRLOCK_TEST_IMAGE_CACHE, as make test does): %s", line)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bins+":"+os.Getenv("PATH"), "AIRLOCK_HOME="+filepath.Join(dir, "home"), "API_KEY=readme-secret-9d2f")
		if cache != "" {
			cmd.Env = append(cmd.Env, "AIRLOCK_CACHE_DIR="+cache)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("README.md's line failed: %s\n%v\n%s", line, err, out.String())
			continue
		}
		if strings.Contains(out.String(), "readme-secret") {
			t.Errorf("README.md's line printed the secret: %s\n%s", line, out.String())
		}
		ran++
	}
	if ran < 10 {
		t.Errorf("ran %d of README.md's CLI lines, want at least 10", ran)
	}
}

// TestReadmeDetachedSession runs README.md's block on sandboxes that
// outlive a command as one shell session, in order: every line must
// succeed. Lines that follow a running command (logs -f, attach) are
// stopped after a few seconds, as a user stops them; -it needs a terminal
// (the CLI's own tests drive one).
func TestReadmeDetachedSession(t *testing.T) {
	e := newReadmeEnv(t, "readme-detached-")
	work := e.work
	if err := os.MkdirAll(filepath.Join(work, "src", "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(work, "src", "main.py"), []byte("print('hi')\n"), 0o644)
	os.WriteFile(filepath.Join(work, "src", "pkg", "util.py"), []byte("X = 1\n"), 0o644)

	var script strings.Builder
	script.WriteString("set -u\n")
	ran := 0
	for i, line := range commandLines(blockAfter(t, "### Sandboxes that outlive a command", "sh")) {
		switch {
		case strings.Contains(line, " -it "):
			t.Logf("not run here (needs a terminal; cli's TTY tests drive one): %s", line)
			continue
		case strings.Contains(line, "logs -f") || strings.HasPrefix(line, "airlock attach") || strings.HasPrefix(line, "airlock events"):
			// Following a running command: stopped as a user stops it.
			fmt.Fprintf(&script, "timeout -s KILL 3 %s; rc=$?; [ $rc = 137 ] || { echo 'line %d (%s) ended with '$rc >&2; exit 1; }\n", line, i+1, shellQuoteless(line))
		default:
			fmt.Fprintf(&script, "%s || { echo 'line %d (%s) failed' >&2; exit 1; }\n", line, i+1, shellQuoteless(line))
		}
		ran++
	}
	if out, err := e.run(t, script.String(), ""); err != nil {
		t.Fatalf("README.md's session failed: %v\n%s", err, out)
	}
	if ran < 15 {
		t.Errorf("ran %d of the block's lines, want at least 15", ran)
	}
	// What the lines did: the tree went in and came back out.
	for _, p := range []string{"out/main.py", "out/pkg/util.py", "src/main.py"} {
		if _, err := os.Stat(filepath.Join(work, p)); err != nil {
			t.Errorf("after the session: %v", err)
		}
	}
}

// shellQuoteless is line without single quotes, to name it in a message
// that is itself single-quoted.
func shellQuoteless(line string) string { return strings.ReplaceAll(line, "'", "") }

// TestReadmeWarmPools runs README.md's block on pools at the command line
// as one shell session, in order: every line must succeed, and the pool
// it made is gone after its last.
func TestReadmeWarmPools(t *testing.T) {
	e := newReadmeEnv(t, "readme-pools-")
	t.Cleanup(func() {
		rm := exec.Command(filepath.Join(e.bins, "airlock"), "pool", "rm", "py")
		rm.Env = append(os.Environ(), "AIRLOCK_HOME="+e.home)
		rm.Run()
	})
	var script strings.Builder
	script.WriteString("set -u\n")
	lines := commandLines(blockAfter(t, "### Warm pools", "sh"))
	for i, line := range lines {
		fmt.Fprintf(&script, "%s || { echo 'line %d (%s) failed' >&2; exit 1; }\n", line, i+1, shellQuoteless(line))
	}
	out, err := e.run(t, script.String(), "")
	if err != nil {
		t.Fatalf("README.md's pool session failed: %v\n%s", err, out)
	}
	if len(lines) < 8 || !strings.Contains(out, "1\n") || !strings.Contains(out, "done\n") {
		t.Errorf("the pool session ran %d lines and printed:\n%s", len(lines), out)
	}
	if ents, err := os.ReadDir(filepath.Join(e.home, "pools")); err != nil || len(ents) != 0 {
		t.Errorf("pools left after the session: %v %v", ents, err)
	}
}
