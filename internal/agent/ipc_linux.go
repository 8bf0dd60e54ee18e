package agent

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// limitIPC bounds the System V IPC objects of the sandbox's IPC
// namespace, whose sysctls its root (the agent) owns. Commands see
// /proc/sys read-only, so they cannot raise them again.
func limitIPC(l agentproto.IPCLimits) error {
	if l.ShmBytes > 0 {
		page := uint64(os.Getpagesize())
		if err := setSysctl("kernel/shmmax", strconv.FormatUint(l.ShmBytes, 10)); err != nil {
			return err
		}
		if err := setSysctl("kernel/shmall", strconv.FormatUint((l.ShmBytes+page-1)/page, 10)); err != nil {
			return err
		}
	}
	if l.ShmRmidForced {
		if err := setSysctl("kernel/shm_rmid_forced", "1"); err != nil {
			return err
		}
	}
	if l.MsgQueues > 0 {
		if err := setSysctl("kernel/msgmni", strconv.Itoa(l.MsgQueues)); err != nil {
			return err
		}
	}
	if l.MsgQueueBytes > 0 {
		if err := setSysctl("kernel/msgmnb", strconv.Itoa(l.MsgQueueBytes)); err != nil {
			return err
		}
	}
	if sem := l.Sem; sem.Total > 0 {
		v := fmt.Sprintf("%d %d %d %d", sem.PerSet, sem.Total, sem.OpsPerCall, sem.Sets)
		if err := setSysctl("kernel/sem", v); err != nil {
			return err
		}
	}
	return nil
}

// setSysctl writes value to /proc/sys/name. It runs once per sandbox
// start for each bound, so it uses plain system calls: an os.File costs
// three times as much here, trying to register /proc files with the
// runtime's poller.
func setSysctl(name, value string) error {
	fd, err := unix.Open("/proc/sys/"+name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bound IPC: open %s: %w", name, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return fmt.Errorf("bound IPC: set %s to %s: %w", name, value, err)
	}
	return nil
}
