package testnet

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// GitRepo is the path of the Git repository that every public HTTP and
// HTTPS site serves over the smart HTTP protocol (git http-backend), so
// that `git clone https://api.example.com/repo.git` works. The
// repository has one commit on its branch main, with one file,
// GitFile, whose content is GitContent followed by the site's name and a
// newline. It is made on the first request to it; without git on the
// machine, its paths answer 503.
const (
	GitRepo    = "/repo.git"
	GitFile    = "README"
	GitContent = "hello over git from "
)

// gitHandler serves GitRepo for site s: a repository made on first use
// in a directory of its own, removed when the World stops.
func (w *World) gitHandler(s *site) http.Handler {
	var (
		once    sync.Once
		handler http.Handler
		failed  error
	)
	root, mkErr := os.MkdirTemp("", "testnet-git-")
	if mkErr == nil {
		w.closers = append(w.closers, func() { os.RemoveAll(root) })
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			if mkErr != nil {
				failed = mkErr
				return
			}
			handler, failed = newGitBackend(root, s.name)
		})
		if failed != nil {
			http.Error(rw, "testnet: no git repository: "+failed.Error(), http.StatusServiceUnavailable)
			return
		}
		handler.ServeHTTP(rw, r)
	})
}

// newGitBackend makes the repository under root and returns git
// http-backend serving it.
func newGitBackend(root, name string) (http.Handler, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	repo := filepath.Join(root, strings.TrimPrefix(GitRepo, "/"))
	env := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"HOME=" + root,
		"GIT_DIR=" + repo,
		"GIT_AUTHOR_NAME=testnet", "GIT_AUTHOR_EMAIL=testnet@example.com", "GIT_AUTHOR_DATE=2000-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=testnet", "GIT_COMMITTER_EMAIL=testnet@example.com", "GIT_COMMITTER_DATE=2000-01-01T00:00:00Z",
	}
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(git, args...)
		cmd.Env = env
		cmd.Dir = root
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("", "init", "--bare", "--quiet", "--initial-branch=main", repo); err != nil {
		return nil, err
	}
	blob, err := run(GitContent+name+"\n", "hash-object", "-w", "--stdin")
	if err != nil {
		return nil, err
	}
	tree, err := run("100644 blob "+blob+"\t"+GitFile+"\n", "mktree")
	if err != nil {
		return nil, err
	}
	commit, err := run("", "commit-tree", tree, "-m", "testnet repository")
	if err != nil {
		return nil, err
	}
	if _, err := run("", "update-ref", "refs/heads/main", commit); err != nil {
		return nil, err
	}
	return &cgi.Handler{
		Path: backend,
		Dir:  root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=" + os.DevNull,
			"HOME=" + root,
		},
	}, nil
}
