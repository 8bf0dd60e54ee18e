package testnet_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testnet"
)

// TestGitRepo: every full site serves a repository over git's smart
// HTTP protocol, which git itself clones.
func TestGitRepo(t *testing.T) {
	w := testnet.Start(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	resp, body := get(t, w.Client(), w.URL(testnet.Other, testnet.PortHTTPS, testnet.GitRepo+"/info/refs?service=git-upload-pack"))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-git-upload-pack-advertisement" {
		t.Fatalf("info/refs: %s, Content-Type %q\n%s", resp.Status, resp.Header.Get("Content-Type"), body)
	}

	dir := filepath.Join(t.TempDir(), "clone")
	t.Setenv("GIT_SSL_CAINFO", w.CAFile) // over the environment's own
	run(t, "", "git",
		"-c", "http.curloptResolve=api.example.com:443:"+testnet.APIAddr,
		"-c", "protocol.version=2",
		"clone", "--quiet", "https://api.example.com"+testnet.GitRepo, dir)
	got, err := os.ReadFile(filepath.Join(dir, testnet.GitFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := testnet.GitContent + testnet.API + "\n"; string(got) != want {
		t.Errorf("%s: %q, want %q", testnet.GitFile, got, want)
	}
	if r, ok := w.LastRequest(testnet.API + ":443"); !ok || r.Path != testnet.GitRepo+"/git-upload-pack" {
		t.Errorf("last request to api.example.com: %+v, want the upload-pack", r)
	}
}
