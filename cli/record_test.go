package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRecordIsWhatWasAsked: airlock get shows the configuration given on
// the command line, field by field, and nothing the supervisor added for
// itself (the margin by which a sandbox outlives its main command's
// timeout), with secret values redacted.
func TestRecordIsWhatWasAsked(t *testing.T) {
	// Not parallel: a variable copied from the caller's environment.
	t.Setenv("RECORD_TEST_COPIED", "from the caller")
	flags := []string{"run", "-d", "--timeout", "40s", "--memory", "300m", "--disk", "200m", "--pids-limit", "99",
		"--nofile-limit", "77", "--cpus", "0.5", "--max-file-size", "50m", "--max-output", "1m",
		"-e", "FOO=bar", "-e", "API_TOKEN=hunter2", "-e", "RECORD_TEST_COPIED", "--hostname", "recorded-host",
		"--allow-host", "example.com", "--secret", "KEY=s3cret@example.com"}
	want := map[string]any{
		"isolation":  "process",
		"resources":  map[string]any{"cpus": 0.5, "memory_mb": 300.0, "timeout_seconds": 40.0},
		"env":        map[string]any{"FOO": "bar", "API_TOKEN": "[redacted]", "RECORD_TEST_COPIED": "from the caller"},
		"pids_limit": 99.0, "nofile_limit": 77.0, "disk_mb": 200.0, "max_file_size_mb": 50.0,
		"max_output_bytes": float64(1 << 20), "hostname": "recorded-host",
		"network": map[string]any{
			"allowed_hosts": []any{"example.com"},
			"secrets":       map[string]any{"KEY": map[string]any{"value": "[redacted]", "hosts": []any{"example.com"}}},
		},
	}
	for _, command := range [][]string{{"sleep", "30"}, nil} {
		args := flags
		if command != nil {
			args = append(append(append([]string{}, flags...), "--"), command...)
		}
		before := time.Now()
		r := runCLI(t, nil, args...)
		after := time.Now()
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || id == "" {
			t.Fatalf("airlock %q: exit %d, %s", args, r.code, r.stderr)
		}
		t.Cleanup(func() { runCLI(t, nil, "rm", "-f", id) })
		g := runCLI(t, nil, "get", id)
		var rec struct {
			ID        string          `json:"id"`
			Isolation string          `json:"isolation"`
			Command   []string        `json:"command"`
			CreatedAt time.Time       `json:"created_at"`
			Kind      string          `json:"kind"`
			Config    json.RawMessage `json:"config"`
		}
		if err := json.Unmarshal([]byte(g.stdout), &rec); err != nil {
			t.Fatalf("get %s: %v\n%s", id, err, g.stdout)
		}
		var cfg map[string]any
		if err := json.Unmarshal(rec.Config, &cfg); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want) {
			got, _ := json.Marshal(cfg)
			exp, _ := json.Marshal(want)
			t.Errorf("command %q: recorded config\n%s\nwant\n%s", command, got, exp)
		}
		if rec.ID != id || rec.Isolation != "process" || rec.Kind != "detached" || !reflect.DeepEqual(rec.Command, command) {
			t.Errorf("command %q: recorded id %q isolation %q kind %q command %q", command, rec.ID, rec.Isolation, rec.Kind, rec.Command)
		}
		if rec.CreatedAt.Before(before.Add(-time.Second)) || rec.CreatedAt.After(after) {
			t.Errorf("created_at %v is not between %v and %v", rec.CreatedAt, before, after)
		}
		if strings.Contains(g.stdout, "hunter2") || strings.Contains(g.stdout, "s3cret") {
			t.Errorf("get shows a secret value:\n%s", g.stdout)
		}
	}
}
