package airlock

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// ProcessInfo is a process of a sandbox's commands; see Processes.
type ProcessInfo = api.ProcessInfo

// Processes lists the processes of the sandbox's commands by pid, as
// ps inside the sandbox would show them (pids are the sandbox's own),
// leaving out airlock's own process there. A sandbox with more than 512
// (or whose command lines take more than 48 KiB) lists the first and
// counts the rest in more.
func (s *Sandbox) Processes(ctx context.Context) (procs []ProcessInfo, more int, err error) {
	st, err := s.open(ctx, agentproto.Request{Op: agentproto.OpProcesses})
	if err != nil {
		return nil, 0, fmt.Errorf("list the processes of sandbox %s: %w", s.id, err)
	}
	defer st.Close()
	var m agentproto.Msg
	if err := s.readReply(ctx, st.c, &m); err != nil {
		return nil, 0, fmt.Errorf("list the processes of sandbox %s: %w", s.id, err)
	}
	// The agent's answer is the sandbox's word: bounded and cleaned
	// here.
	list := m.Procs
	more = max(m.ProcsMore, 0)
	if len(list) > agentproto.MaxProcesses {
		more += len(list) - agentproto.MaxProcesses
		list = list[:agentproto.MaxProcesses]
	}
	procs = make([]ProcessInfo, 0, len(list))
	for _, p := range list {
		procs = append(procs, ProcessInfo{
			PID: p.PID, PPID: p.PPID, UID: p.UID, State: cleanText(p.State, 4),
			CPUNanos: max(p.CPUTime.Nanoseconds(), 0), RSSBytes: max(p.RSS, 0), ElapsedMs: max(p.Elapsed.Milliseconds(), 0),
			Command: cleanCommand(p.Command),
		})
	}
	return procs, more, nil
}

// cleanCommand bounds a command line from the sandbox to
// agentproto.MaxProcessCommand bytes of valid UTF-8.
func cleanCommand(argv []string) []string {
	var out []string
	left := agentproto.MaxProcessCommand
	for _, a := range argv {
		if left <= 0 {
			break
		}
		a = cleanText(a, left)
		left -= len(a) + 1
		out = append(out, a)
	}
	return out
}

// cleanText is s as valid UTF-8, cut to at most n bytes.
func cleanText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
