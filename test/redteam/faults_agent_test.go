package redteam_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testbin"
)

// When the sandbox's agent (its PID 1) dies under a running sandbox, the
// sandbox has crashed, and every surface says so with the cause: the
// requests under way and after (Go error, JSON-RPC -32002, CLI message),
// the sandbox's Err, its lifecycle event, its state record and list. None
// advises to retry: the command may have run.

// agentKilled is what every report of the crash must say.
const agentKilled = "killed by signal 9"

// checkCrashReport fails the test unless msg reports the agent's death as
// a crash, without advising to retry.
func checkCrashReport(t *testing.T, what, msg string) {
	t.Helper()
	if !strings.Contains(msg, "crashed") || !strings.Contains(msg, agentKilled) || strings.Contains(msg, "retry") {
		t.Errorf("%s: %q, want a crash %s, and no retry", what, msg, agentKilled)
	}
}

func TestFaultAgentKilledEmbed(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		var mu sync.Mutex
		var lifecycle []airlock.LifecycleEvent
		sb := box(t, lv, airlock.Config{OnEvent: func(e airlock.Event) {
			if e.Lifecycle != nil {
				mu.Lock()
				lifecycle = append(lifecycle, *e.Lifecycle)
				mu.Unlock()
			}
		}})
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		// Two commands under way: one streaming, one buffered.
		var out bytes.Buffer
		streaming, err := sb.Start(ctx, airlock.Command{Shell: "sleep 300", Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		buffered, err := sb.Start(ctx, airlock.Command{Shell: "sleep 300"})
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(sb.PID(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*airlock.Process{streaming, buffered} {
			_, err := p.Wait()
			if !errors.Is(err, airlock.ErrCrashed) || !errors.Is(err, airlock.ErrClosed) {
				t.Errorf("exec under way: %v, want ErrCrashed (and ErrClosed)", err)
			}
			if err != nil {
				checkCrashReport(t, "exec under way", err.Error())
			}
		}
		ce, ok := errors.AsType[*airlock.CrashError](sb.Err())
		if !ok || !strings.Contains(ce.Reason, agentKilled) {
			t.Errorf("Err() = %v, want a *CrashError %s", sb.Err(), agentKilled)
		}
		if _, err := sb.Exec(ctx, "true"); !errors.Is(err, airlock.ErrCrashed) {
			t.Errorf("exec after the crash: %v, want ErrCrashed", err)
		}
		if _, err := sb.ReadFile(ctx, "/etc/hostname"); !errors.Is(err, airlock.ErrCrashed) {
			t.Errorf("read after the crash: %v, want ErrCrashed", err)
		}
		// The event is emitted apart from the errors that already say
		// so, and may come after them.
		var got []airlock.LifecycleEvent
		testbin.WaitFor(10*time.Second, func() bool {
			mu.Lock()
			got = append([]airlock.LifecycleEvent(nil), lifecycle...)
			mu.Unlock()
			return len(got) > 0 && got[len(got)-1].State == "crashed"
		})
		if n := len(got); n == 0 || got[n-1].State != "crashed" || !strings.Contains(got[n-1].Reason, agentKilled) {
			t.Errorf("lifecycle events %+v, want the last to be crashed, %s", got, agentKilled)
		}
		if left := leftBehind(sb.ID()); len(left) > 0 {
			t.Errorf("the crashed sandbox left behind: %v", left)
		}
	})
}

func TestFaultAgentKilledRPC(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		s := startRPC(t, nil)
		id := s.create(1, string(lv))
		s.send(2, "exec_stream", map[string]any{"command": "echo started; exec sleep 300", "mode": "notifications"})
		for {
			m := s.next()
			if m.Method == "exec.output" {
				break
			}
			if m.Method == "" {
				t.Fatalf("exec_stream answered before its output: %+v %s", m.Error, m.Result)
			}
		}
		if err := syscall.Kill(agentOf(t, s.cmd.Process.Pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		m := s.response(2)
		if m.Error == nil || m.Error.Code != -32002 {
			t.Fatalf("exec under way when the agent died: %+v %s, want error -32002", m.Error, m.Result)
		}
		checkCrashReport(t, "exec under way", m.Error.Message)
		s.send(3, "exec", map[string]any{"command": "true"})
		if m := s.response(3); m.Error == nil || m.Error.Code != -32002 {
			t.Errorf("exec after the crash: %+v, want error -32002", m.Error)
		} else {
			checkCrashReport(t, "exec after the crash", m.Error.Message)
		}
		crashedIn := func(n rpcMsg) bool {
			var ev struct {
				Type      string `json:"type"`
				Lifecycle struct {
					State  string `json:"state"`
					Reason string `json:"reason"`
				} `json:"lifecycle"`
			}
			return n.Method == "event" && json.Unmarshal(n.Params, &ev) == nil && ev.Type == "lifecycle" && ev.Lifecycle.State == "crashed" &&
				strings.Contains(ev.Lifecycle.Reason, agentKilled)
		}
		crashed := slices.ContainsFunc(s.notes, crashedIn)
		// Events travel apart from responses: the event may come after
		// the answers that already say the sandbox crashed.
		for deadline := time.After(10 * time.Second); !crashed; {
			select {
			case m, ok := <-s.lines:
				if !ok {
					t.Fatal("airlock rpc closed its output")
				}
				crashed = crashedIn(m)
			case <-deadline:
				t.Fatalf("no lifecycle event says the sandbox crashed, %s", agentKilled)
			}
		}
		checkCrashRecord(t, id)
		if left := leftBehind(id); len(left) > 0 {
			t.Errorf("the crashed sandbox left behind: %v", left)
		}
	})
}

func TestFaultAgentKilledDetached(t *testing.T) {
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		out, errOut, code := cli(t, "run", "-d", "--isolation", string(lv), "--", "sleep", "300")
		if code != 0 {
			t.Fatalf("run -d: exit %d: %s", code, errOut)
		}
		id := strings.TrimSpace(out)
		t.Cleanup(func() { cli(t, "rm", "-f", id) })
		sup := getRecord(t, id).Supervisor.PID

		// An exec under way through the control socket.
		ex := exec.Command(bins.cli, "exec", id, "--", "sh", "-c", "echo started; exec sleep 300")
		var exErr bytes.Buffer
		ex.Stderr = &exErr
		stdout, err := ex.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := ex.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
			t.Fatalf("exec's first line: %v", err)
		}
		if err := syscall.Kill(agentOf(t, sup), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if got := waitExit(t, ex); got != "exit 125" {
			t.Errorf("airlock exec under way ended with %s, want exit 125", got)
		}
		checkCrashReport(t, "airlock exec under way", exErr.String())
		checkCrashRecord(t, id)
		// The supervisor has recorded the crash and exits, leaving nothing.
		deadline := time.Now().Add(hang)
		for syscall.Kill(sup, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if left := leftBehind(id); len(left) > 0 {
			t.Errorf("the crashed sandbox left behind: %v", left)
		}
		_, errOut, code = cli(t, "exec", id, "--", "true")
		if code == 0 || !strings.Contains(errOut, "crashed") {
			t.Errorf("exec after the crash: exit %d: %s, want a refusal that says crashed", code, errOut)
		}
	})
}

// checkCrashRecord checks that get, list --json and the list table say
// that sandbox id crashed, and why.
func checkCrashRecord(t *testing.T, id string) {
	t.Helper()
	r := waitRecord(t, id)
	if r.Status != "crashed" || !strings.Contains(r.Reason, agentKilled) {
		t.Errorf("get: %+v, want crashed, %s", r, agentKilled)
	}
	out, _, _ := cli(t, "list", "-a", "--json")
	var recs []record
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("list --json: %v", err)
	}
	for _, rec := range recs {
		if rec.ID == id && (rec.Status != "crashed" || !strings.Contains(rec.Reason, agentKilled)) {
			t.Errorf("list --json: %+v, want crashed, %s", rec, agentKilled)
		}
	}
	table, _, _ := cli(t, "list", "-a")
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, id) && (!strings.Contains(line, "crashed") || !strings.Contains(line, agentKilled)) {
			t.Errorf("list: %q, want crashed, %s", line, agentKilled)
		}
	}
}
