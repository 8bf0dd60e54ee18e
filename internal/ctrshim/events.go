//go:build linux

package ctrshim

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"

	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/runtime"

	"github.com/airlock-sandbox/airlock"
)

// eventLog appends the sandboxes' events to the node's log, one JSON
// object per line, each with the containerd task it belongs to.
type eventLog struct {
	mu sync.Mutex
	f  *os.File
}

func openEventLog(path string) (*eventLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open the shim's event log: %w", err)
	}
	return &eventLog{f: f}, nil
}

type loggedEvent struct {
	Task string `json:"task"`
	airlock.Event
}

func (l *eventLog) write(task string, e airlock.Event) {
	b, err := json.Marshal(loggedEvent{Task: task, Event: e})
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

// note records that task's sandbox runs with less confinement than asked
// (airlock.Sandbox.Notes), and why.
func (l *eventLog) note(task, note string) {
	b, err := json.Marshal(struct {
		Task string `json:"task"`
		Type string `json:"type"`
		Note string `json:"note"`
	}{task, "confinement_note", note})
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

func (l *eventLog) close() error { return l.f.Close() }

// onEvent receives task id's sandbox's events: every one goes to the
// node's event log, and an out-of-memory kill also to containerd, as
// its TaskOOM.
func (s *Service) onEvent(task string) func(airlock.Event) {
	return func(e airlock.Event) {
		if s.events != nil {
			s.events.write(task, e)
		}
		// containerd's log shows the shim's: why a sandbox ended under
		// its task is worth a line there.
		if l := e.Lifecycle; l != nil && l.State == "crashed" {
			s.log.Warn("the task's sandbox crashed", "task", task, "reason", l.Reason)
		}
		if e.Exec != nil && e.Exec.KilledBy == string(airlock.KilledByOOM) {
			go s.publish(s.ctx, runtime.TaskOOMEventTopic, &eventstypes.TaskOOM{ContainerID: task})
		}
	}
}

// metrics is a sandbox's usage in the form of cgroup v2's metrics, which
// containerd's CRI plugin and ctr understand.
func metrics(u airlock.Usage) *v2.Metrics {
	return &v2.Metrics{
		Pids:         &v2.PidsStat{Current: u.Pids, Limit: u.PidsLimit},
		CPU:          &v2.CPUStat{UsageUsec: u.CPUNanos / 1000},
		Memory:       &v2.MemoryStat{Usage: u.MemoryBytes, UsageLimit: u.MemoryLimitBytes, MaxUsage: u.MemoryPeakBytes},
		MemoryEvents: &v2.MemoryEvents{OomKill: u.OOMKills},
		Network:      []*v2.NetworkStat{{Name: "eth0", RxBytes: u.NetRxBytes, TxBytes: u.NetTxBytes}},
	}
}
