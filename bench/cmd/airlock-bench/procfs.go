//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procMem is the memory of one process as /proc reports it, in bytes.
type procMem struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	// RSS is VmRSS: every resident page the process maps, shared or not.
	RSS int64 `json:"rss_bytes"`
	// PSS is the proportional set size from smaps_rollup (pages shared
	// with N processes count 1/N); 0 when unavailable.
	PSS int64 `json:"pss_bytes"`
	// Charged is PSS where available, else RSS: what is summed.
	Charged int64 `json:"charged_bytes"`
	// Source says which of the two Charged is ("pss" or "rss").
	Source string `json:"source"`
}

// readProcMem reads the memory of pid. A missing smaps_rollup (old
// kernels, no permission) falls back to VmRSS.
func readProcMem(pid int) (procMem, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return procMem{}, err
	}
	m := procMem{PID: pid}
	m.RSS, _ = kbField(status, "VmRSS:")
	m.Comm = strings.TrimSpace(string(fieldLine(status, "Name:")))
	if roll, err := os.ReadFile(filepath.Join(dir, "smaps_rollup")); err == nil {
		if pss, ok := kbField(roll, "Pss:"); ok {
			m.PSS = pss
		}
	}
	if m.PSS > 0 {
		m.Charged, m.Source = m.PSS, "pss"
	} else {
		m.Charged, m.Source = m.RSS, "rss"
	}
	return m, nil
}

// fieldLine returns the rest of the first line of data that starts with key.
func fieldLine(data []byte, key string) []byte {
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return bytes.TrimSpace(rest)
		}
	}
	return nil
}

// kbField parses a "Key:   1234 kB" line (as in /proc/PID/status,
// smaps_rollup and /proc/meminfo) into bytes.
func kbField(data []byte, key string) (int64, bool) {
	f := strings.Fields(string(fieldLine(data, key)))
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false
	}
	if len(f) > 1 && strings.EqualFold(f[1], "kB") {
		n *= 1024
	}
	return n, true
}

// parseStatPPID extracts the parent pid from the contents of /proc/PID/stat.
// The command name is in parentheses and may itself contain spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatPPID(stat []byte) (int, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat line")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("malformed stat line")
	}
	return strconv.Atoi(f[1])
}

// processTree returns root and every live descendant of it, found by
// walking the ppid links of /proc/*/stat. root comes first.
func processTree(root int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		ppid, err := parseStatPPID(b)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	return descendants(root, children)
}

// descendants does a breadth-first walk of children from root.
func descendants(root int, children map[int][]int) []int {
	out := []int{root}
	seen := map[int]bool{root: true}
	for i := 0; i < len(out); i++ {
		for _, c := range children[out[i]] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// selfRSS returns this process's VmRSS in bytes.
func selfRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	v, ok := kbField(b, "VmRSS:")
	if !ok {
		return 0, fmt.Errorf("no VmRSS in /proc/self/status")
	}
	return v, nil
}

// meminfo is a few system-wide kernel memory counters, in bytes.
type meminfo struct {
	Slab        int64 `json:"slab_bytes"`
	PageTables  int64 `json:"page_tables_bytes"`
	KernelStack int64 `json:"kernel_stack_bytes"`
	Shmem       int64 `json:"shmem_bytes"`
	Used        int64 `json:"used_bytes"` // MemTotal - MemAvailable
}

func (m meminfo) kernel() int64 { return m.Slab + m.PageTables + m.KernelStack + m.Shmem }

func readMeminfo() (meminfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return meminfo{}, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(bufio.NewReader(f)); err != nil {
		return meminfo{}, err
	}
	data := b.Bytes()
	var m meminfo
	m.Slab, _ = kbField(data, "Slab:")
	m.PageTables, _ = kbField(data, "PageTables:")
	m.KernelStack, _ = kbField(data, "KernelStack:")
	m.Shmem, _ = kbField(data, "Shmem:")
	total, _ := kbField(data, "MemTotal:")
	avail, _ := kbField(data, "MemAvailable:")
	m.Used = total - avail
	return m, nil
}
