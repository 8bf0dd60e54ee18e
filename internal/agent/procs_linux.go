package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// clockTicks is USER_HZ, the unit of /proc's times: 100 on every Linux
// architecture airlock runs on (and in gVisor's Sentry).
const clockTicks = 100

// procsBudget bounds the encoded size of a process list, which crosses
// the spawner's socket as one message (its reader's buffer is 64 KiB).
const procsBudget = 48 << 10

// listProcesses reads the processes of this PID namespace from /proc,
// by pid, leaving out self (the spawner). It returns at most
// agentproto.MaxProcesses of them within procsBudget, and how many more
// there were.
func listProcesses(self int) ([]agentproto.Process, int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, 0
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	uptime := readUptime()
	pageSize := int64(os.Getpagesize())
	var out []agentproto.Process
	size := 0
	for i, pid := range pids {
		if len(out) >= agentproto.MaxProcesses {
			// The rest are counted, not read.
			return out, len(pids) - i
		}
		p, ok := readProcess(pid, uptime, pageSize)
		if !ok {
			continue // gone meanwhile
		}
		n := 64
		for _, a := range p.Command {
			n += len(a) + 2
		}
		if size+n > procsBudget {
			return out, len(pids) - i
		}
		size += n
		out = append(out, p)
	}
	return out, 0
}

// readUptime is the time since boot, from /proc/uptime.
func readUptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	s, _ := strconv.ParseFloat(f[0], 64)
	return time.Duration(s * float64(time.Second))
}

// readProcess reads one process's stat, status and command line.
func readProcess(pid int, uptime time.Duration, pageSize int64) (agentproto.Process, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	b, err := os.ReadFile(dir + "stat")
	if err != nil {
		return agentproto.Process{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return agentproto.Process{}, false
	}
	comm := s[open+1 : end]
	f := strings.Fields(s[end+1:])
	if len(f) < 22 {
		return agentproto.Process{}, false
	}
	num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	p := agentproto.Process{
		PID: pid, PPID: int(num(1)), State: f[0],
		CPUTime: time.Duration(num(11)+num(12)) * time.Second / clockTicks,
		RSS:     num(21) * pageSize,
	}
	if started := time.Duration(num(19)) * time.Second / clockTicks; uptime > started {
		p.Elapsed = uptime - started
	}
	if st, err := os.ReadFile(dir + "status"); err == nil {
		for line := range bytes.Lines(st) {
			if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
				if u := bytes.Fields(rest); len(u) > 0 {
					uid, _ := strconv.ParseUint(string(u[0]), 10, 32)
					p.UID = uint32(uid)
				}
				break
			}
		}
	}
	p.Command = readCmdline(dir+"cmdline", comm)
	return p, true
}

// readCmdline is a process's argv, cut to agentproto.MaxProcessCommand
// bytes; "[comm]" for one with none.
func readCmdline(path, comm string) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{"[" + comm + "]"}
	}
	defer f.Close()
	buf := make([]byte, agentproto.MaxProcessCommand)
	n, _ := f.Read(buf)
	b := bytes.TrimRight(buf[:n], "\x00")
	if len(b) == 0 {
		return []string{"[" + comm + "]"}
	}
	return strings.Split(string(b), "\x00")
}

// processes answers a process list request of the agent's.
func (z *zserver) processes(m zmsg) {
	procs, more := listProcesses(os.Getpid())
	z.reply(zmsg{Op: "ps", ID: m.ID, Procs: procs, More: more})
}

// Processes lists the processes of the spawner's PID namespace, its own
// left out: those of the sandbox's commands.
func (z *zclient) Processes(ctx context.Context) ([]agentproto.Process, int, error) {
	id := z.nextID.Add(1)
	ch := make(chan zmsg, 1)
	z.mu.Lock()
	if z.dead != nil {
		z.mu.Unlock()
		return nil, 0, z.dead
	}
	z.pending[id] = ch
	z.mu.Unlock()
	forget := func() {
		z.mu.Lock()
		delete(z.pending, id)
		z.mu.Unlock()
	}
	if err := z.send(zmsg{Op: "ps", ID: id}, nil); err != nil {
		forget()
		return nil, 0, fmt.Errorf("ask the spawner for the processes: %w", err)
	}
	select {
	case r := <-ch:
		if r.Err != "" {
			return nil, 0, errors.New(r.Err)
		}
		return r.Procs, r.More, nil
	case <-ctx.Done():
		forget()
		return nil, 0, ctx.Err()
	}
}

// Processes lists the processes of the current spawner's commands.
func (r *restartingSpawner) Processes(ctx context.Context) ([]agentproto.Process, int, error) {
	z, err := r.current()
	if err != nil {
		return nil, 0, err
	}
	return z.Processes(ctx)
}
