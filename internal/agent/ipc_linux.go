package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// limitIPC bounds the System V IPC objects of the sandbox's IPC
// namespace, whose sysctls its root (the agent) owns. Commands see
// /proc/sys read-only, so they cannot raise them again.
func limitIPC(l agentproto.IPCLimits) error {
	set := func(name, value string) error {
		// Opened without O_CREAT or O_TRUNC: a file of /proc/sys only.
		f, err := os.OpenFile("/proc/sys/"+name, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("bound IPC: %w", err)
		}
		_, err = f.WriteString(value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("bound IPC: set %s to %s: %w", name, value, err)
		}
		return nil
	}
	if l.ShmBytes > 0 {
		page := uint64(os.Getpagesize())
		if err := set("kernel/shmmax", strconv.FormatUint(l.ShmBytes, 10)); err != nil {
			return err
		}
		if err := set("kernel/shmall", strconv.FormatUint((l.ShmBytes+page-1)/page, 10)); err != nil {
			return err
		}
	}
	if l.ShmRmidForced {
		if err := set("kernel/shm_rmid_forced", "1"); err != nil {
			return err
		}
	}
	if l.MsgQueues > 0 {
		if err := set("kernel/msgmni", strconv.Itoa(l.MsgQueues)); err != nil {
			return err
		}
	}
	if l.MsgQueueBytes > 0 {
		if err := set("kernel/msgmnb", strconv.Itoa(l.MsgQueueBytes)); err != nil {
			return err
		}
	}
	if l.SemSets > 0 || l.Sems > 0 {
		// kernel.sem is "SEMMSL SEMMNS SEMOPM SEMMNI"; the per-set and
		// per-call bounds stay the kernel's.
		b, err := os.ReadFile("/proc/sys/kernel/sem")
		if err != nil {
			return fmt.Errorf("bound IPC: %w", err)
		}
		f := strings.Fields(string(b))
		if len(f) != 4 {
			return fmt.Errorf("bound IPC: kernel.sem reads %q, not four numbers", b)
		}
		if l.Sems > 0 {
			f[1] = strconv.Itoa(l.Sems)
		}
		if l.SemSets > 0 {
			f[3] = strconv.Itoa(l.SemSets)
		}
		if err := set("kernel/sem", strings.Join(f, " ")); err != nil {
			return err
		}
	}
	return nil
}
