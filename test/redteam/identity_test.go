package redteam_test

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// hostFile reads a file of the host, or "" when it does not exist.
func hostFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostBtime is btime of the host's /proc/stat: its boot, to the second.
func hostBtime(t *testing.T) int64 {
	t.Helper()
	for _, l := range strings.Split(hostFile(t, "/proc/stat"), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no btime in /proc/stat")
	return 0
}

var bootIDForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestAttackHostIdentity reads, from inside sandboxes, everything that
// would tell which machine (and which boot of it) they run on: the
// kernel's command line, the boot id, the boot time and the clocks that
// count from it, the machine id, DMI and firmware data, the host's name
// and the host's paths. Each sandbox must see values of its own, which
// also tells two sandboxes on one host apart.
func TestAttackHostIdentity(t *testing.T) {
	hostCmdline := hostFile(t, "/proc/cmdline")
	hostBootID := strings.TrimSpace(hostFile(t, "/proc/sys/kernel/random/boot_id"))
	hostMachineID := strings.TrimSpace(hostFile(t, "/etc/machine-id"))
	hostName, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	eachLevel(t, func(t *testing.T, lv airlock.Isolation) {
		start := time.Now()
		a := box(t, lv, airlock.Config{})
		b := box(t, lv, airlock.Config{})

		probe := `cat /proc/cmdline; echo "--"; cat /proc/sys/kernel/random/boot_id; cat /proc/sys/kernel/random/boot_id`
		var ids []string
		for _, sb := range []*airlock.Sandbox{a, b} {
			cmdline, bootIDs, _ := strings.Cut(ok(t, sb, probe), "--\n")
			if hostCmdline != "" && cmdline == hostCmdline {
				t.Errorf("/proc/cmdline is the host's: %q", cmdline)
			}
			for _, opt := range strings.Fields(hostCmdline) {
				// Options that name the host's devices and services.
				if strings.Contains(opt, "vsock") || strings.Contains(opt, "firecracker") || strings.HasPrefix(opt, "root=") {
					if strings.Contains(cmdline, opt) {
						t.Errorf("/proc/cmdline %q carries the host's option %q", cmdline, opt)
					}
				}
			}
			two := strings.Fields(bootIDs)
			if len(two) != 2 || two[0] != two[1] || !bootIDForm.MatchString(two[0]) {
				t.Fatalf("boot_id read twice: %q, want one UUID, stable", bootIDs)
			}
			if two[0] == hostBootID {
				t.Errorf("boot_id %s is the host's", two[0])
			}
			ids = append(ids, two[0])
		}
		if ids[0] == ids[1] {
			t.Errorf("two sandboxes share boot_id %s", ids[0])
		}

		// Neither file can be changed from inside.
		for _, p := range []string{"/proc/cmdline", "/proc/sys/kernel/random/boot_id"} {
			if r := sh(t, a, fmt.Sprintf("echo x > %s", p)); r.ExitCode == 0 {
				t.Errorf("writing %s succeeded", p)
			}
		}
		if again := strings.Fields(ok(t, a, "cat /proc/sys/kernel/random/boot_id")); len(again) != 1 || again[0] != ids[0] {
			t.Errorf("boot_id changed to %q after a write", again)
		}

		// The boot time and the clocks that count from boot start with
		// the sandbox, not with the host.
		out := py(t, a, `import time
btime = [int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime ")][0]
up = float(open("/proc/uptime").read().split()[0])
start1 = int(open("/proc/1/stat").read().rsplit(")", 1)[1].split()[19])
print(btime, up, time.clock_gettime(time.CLOCK_BOOTTIME), time.clock_gettime(time.CLOCK_MONOTONIC), start1)`)
		var btime, start1 int64
		var up, boot, mono float64
		if _, err := fmt.Sscan(out, &btime, &up, &boot, &mono, &start1); err != nil {
			t.Fatalf("clocks %q: %v", out, err)
		}
		age := time.Since(start).Seconds()
		if hb := hostBtime(t); btime == hb {
			t.Errorf("btime in /proc/stat is the host's boot, %d", btime)
		}
		// Whole seconds: the sandbox's zero is its start, rounded down.
		if btime < start.Unix()-1 {
			t.Errorf("btime %d is before the sandbox was created (%d)", btime, start.Unix())
		}
		for name, v := range map[string]float64{"/proc/uptime": up, "CLOCK_BOOTTIME": boot, "CLOCK_MONOTONIC": mono} {
			if v < 0 || v > age+1 {
				t.Errorf("%s = %.2f s in a sandbox created %.2f s ago", name, v, age)
			}
		}
		// The spawner started after the sandbox's zero: its start time
		// must not wrap around.
		if start1 < 0 || float64(start1)/100 > age+1 {
			t.Errorf("start time of PID 1 = %d ticks in a sandbox created %.2f s ago", start1, age)
		}

		// Host-wide identifiers that must not be there at all.
		for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id", "/etc/hostid",
			"/sys/class/dmi/id/product_uuid", "/sys/class/dmi/id/product_serial", "/sys/class/dmi/id/board_serial",
			"/sys/firmware", "/sys/class/net", "/sys/devices/virtual/dmi"} {
			if r := sh(t, a, "cat "+p+" || ls "+p); r.ExitCode == 0 && len(bytes.TrimSpace(r.Stdout)) > 0 {
				t.Errorf("%s is readable in the sandbox: %q", p, r.Stdout)
			}
		}
		// Nothing readable names the host, its boot or its paths.
		home, _ := airlock.Home()
		secrets := map[string]string{"the host's boot id": hostBootID, "the host's machine id": hostMachineID,
			"the state directory": home, "the agent's path": bins.agent}
		if len(hostName) > 3 && hostName != "localhost" {
			secrets["the host's name"] = hostName
		}
		for what, s := range secrets {
			if s == "" {
				continue
			}
			r := sh(t, a, fmt.Sprintf("grep -rlF -- %q /etc /var /run /root /proc/self/mountinfo /proc/self/environ /proc/sys/kernel /proc/cmdline 2>/dev/null; hostname; uname -n", s))
			if bytes.Contains(r.Stdout, []byte(s)) || strings.Contains(string(r.Stdout), "/") {
				t.Errorf("%s (%q) is readable in the sandbox: %q", what, s, r.Stdout)
			}
		}
	})
}
