package airlock_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// Processes lists what runs in the sandbox as ps inside would: the
// commands' processes with the sandbox's pids, their parents, owners and
// command lines, and not airlock's own process there.
func TestProcesses(t *testing.T) {
	eachIsolation(t, func(t *testing.T, lv airlock.Isolation) {
		ctx := testCtx(t, time.Minute)
		sb := newSandbox(t, airlock.Config{Isolation: lv})
		p, err := sb.Start(ctx, airlock.Command{Argv: []string{"sleep", "1000"}, DiscardOutput: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Start(ctx, airlock.Command{Shell: "sleep 999 & wait", DiscardOutput: true, User: "1234"}); err != nil {
			t.Fatal(err)
		}
		var procs []airlock.ProcessInfo
		deadline := time.Now().Add(30 * time.Second)
		for {
			var more int
			if procs, more, err = sb.Processes(ctx); err != nil {
				t.Fatal(err)
			}
			if more != 0 {
				t.Errorf("%d processes left out of a list of %d", more, len(procs))
			}
			// Both asleep: under an emulated CPU a program takes a while
			// to start.
			asleep := 0
			for _, q := range procs {
				if q.State == "S" && (slices.Equal(q.Command, []string{"sleep", "999"}) || q.PID == p.Pid()) {
					asleep++
				}
			}
			if asleep == 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		byPid := map[int]airlock.ProcessInfo{}
		for _, q := range procs {
			byPid[q.PID] = q
			if strings.Contains(strings.Join(q.Command, " "), "airlock") {
				t.Errorf("airlock's own process is listed: %+v", q)
			}
		}
		sleep, ok := byPid[p.Pid()]
		if !ok || !slices.Equal(sleep.Command, []string{"sleep", "1000"}) || sleep.State != "S" || sleep.ElapsedMs < 0 || sleep.RSSBytes <= 0 {
			t.Errorf("the command of pid %d: %+v (listed: %+v)", p.Pid(), sleep, procs)
		}
		var child airlock.ProcessInfo
		for _, q := range procs {
			if slices.Equal(q.Command, []string{"sleep", "999"}) {
				child = q
			}
		}
		if parent, ok := byPid[child.PPID]; !ok || child.UID != 1234 || parent.Command[0] != "/bin/sh" {
			t.Errorf("a shell's child: %+v, its parent %+v (listed: %+v)", child, parent, procs)
		}
	})
}
