package rpc

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// create with an image the cache lacks gets it first, sending
// image.progress notifications while it does, and says in its result
// what the image is.
func TestCreateImageProgress(t *testing.T) {
	needAgent(t)
	ref, err := testbin.BusyboxLayout(filepath.Join(t.TempDir(), "layout"), "v1", v1.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/srv", Cmd: []string{"sh"}})
	if err != nil {
		t.Skip(err)
	}
	t.Setenv("AIRLOCK_CACHE_DIR", t.TempDir())
	c := newClient(t, Options{AllowCreate: true}, ServeOptions{})
	var res api.CreateResult
	c.result(1, api.MethodCreate, map[string]any{"image": ref}, &res)
	if res.Image.Name != ref || res.Image.WorkingDir != "/srv" || len(res.Image.Cmd) != 1 || len(res.Image.Key) != 71 {
		t.Fatalf("create's image: %+v", res.Image)
	}
	_, ok := c.note(10*time.Second, func(m msg) bool {
		if string(m["method"]) != `"`+api.NotifyImageProgress+`"` {
			return false
		}
		var p api.ImageProgress
		return json.Unmarshal(m["params"], &p) == nil && p.Step == "done" && p.Image == ref && p.Done > 0
	})
	if !ok {
		t.Fatalf("no image.progress notification with step done for %s", ref)
	}
	var out api.ExecResult
	c.result(2, api.MethodExec, map[string]any{"command": "pwd"}, &out)
	if b, _ := base64.StdEncoding.DecodeString(out.Stdout); string(b) != "/srv\n" {
		t.Fatalf("exec pwd: %+v", out)
	}
	// An image that cannot be got fails create, naming it.
	m := c.call(3, api.MethodCreate, map[string]any{"image": "oci:" + t.TempDir() + ":nope"})
	e := wantError(t, m, api.CodeStartFailed)
	if !strings.Contains(e.Message, "nope") {
		t.Fatalf("create with a missing image: %q", e.Message)
	}
}
