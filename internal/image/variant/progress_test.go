package variant

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// Lines as mmdebstrap 1.3.5 --verbose writes them while building
// minimal.
const sampleOutput = `I: automatically chosen format: directory
Unpacking usr-is-merged (1) ...
Setting up usr-is-merged (1) ...
I: running apt-get update...
Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]
Get:2 http://deb.debian.org/debian bookworm/main amd64 Packages [8790 kB]
I: downloading packages with apt...
0 upgraded, 3 newly installed, 0 to remove and 0 not upgraded.
Need to get 3.0 MB of archives.
Get:1 http://deb.debian.org/debian bookworm/main amd64 gcc-12-base amd64 12.2.0-14+deb12u1 [37.6 kB]
Get:2 http://deb.debian.org/debian bookworm/main amd64 libc6 amd64 2.36-9+deb12u14 [2757 kB]
Get:3 http://deb.debian.org/debian-security bookworm-security/main amd64 zlib1g amd64 1:1.2.13.dfsg-1 [1,205 kB]
I: extracting archives...
I: installing essential packages...
Unpacking gcc-12-base:amd64 (12.2.0-14+deb12u1) ...
Unpacking libc6:amd64 (2.36-9+deb12u14) ...
Setting up gcc-12-base:amd64 (12.2.0-14+deb12u1) ...
I: installing remaining packages inside the chroot...
0 upgraded, 1 newly installed, 0 to remove and 0 not upgraded.
Need to get 316 kB/1,000 kB of archives.
Get:1 http://deb.debian.org/debian bookworm/main amd64 curl amd64 7.88.1-10+deb12u15 [316 kB]
Unpacking curl (7.88.1-10+deb12u15) ...
Setting up curl (7.88.1-10+deb12u15) ...
I: cleaning package lists and apt cache...
I: success in 505.8044 seconds
`

func TestProgressParser(t *testing.T) {
	p := &progressParser{image: "minimal"}
	var got []store.Progress
	for _, l := range strings.Split(sampleOutput, "\n") {
		if r, ok := p.line(l); ok {
			got = append(got, r)
		}
	}
	const e, r = ItemEssential, ItemPackages
	want := []store.Progress{
		{Step: StepResolve, Item: "package lists"},
		{Step: StepDownload, Item: e},
		{Step: StepDownload, Item: e, Total: 3_000_000},
		{Step: StepDownload, Item: e, Done: 37_600, Total: 3_000_000},
		{Step: StepDownload, Item: e, Done: 2_794_600, Total: 3_000_000},
		{Step: StepDownload, Item: e, Done: 3_000_000, Total: 3_000_000}, // 3,999,600 bounded by Total
		{Step: StepUnpack, Item: e, Total: 3, Unit: "items"},
		{Step: StepUnpack, Item: e, Done: 1, Total: 3, Unit: "items"},
		{Step: StepUnpack, Item: e, Done: 2, Total: 3, Unit: "items"},
		{Step: StepConfigure, Item: e, Done: 1, Total: 3, Unit: "items"},
		{Step: StepDownload, Item: r},
		{Step: StepDownload, Item: r, Total: 316_000},
		{Step: StepDownload, Item: r, Done: 316_000, Total: 316_000},
		{Step: StepUnpack, Item: r, Done: 1, Total: 1, Unit: "items"},
		{Step: StepConfigure, Item: r, Done: 1, Total: 1, Unit: "items"},
		{Step: StepStrip},
	}
	if len(got) != len(want) {
		t.Fatalf("%d reports, want %d:\n%+v", len(got), len(want), got)
	}
	for i := range want {
		want[i].Image = "minimal"
		if got[i] != want[i] {
			t.Errorf("report %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[[2]string]int64{
		{"38.0", "MB"}: 38_000_000, {"1,205", "kB"}: 1_205_000, {"12", "B"}: 12, {"1.5", "GB"}: 1_500_000_000,
		{"x", "MB"}: 0, {"-1", "kB"}: 0, {"1e300", "GB"}: 0,
	} {
		if got := parseSize(in[0], in[1]); got != want {
			t.Errorf("parseSize(%q, %q) = %d, want %d", in[0], in[1], got, want)
		}
	}
}

// The throttle passes a step's first report and its last at once, and
// at most one report an interval between.
func TestThrottle(t *testing.T) {
	var got []store.Progress
	th := &throttle{fn: func(p store.Progress) { got = append(got, p) }, interval: 1 << 40}
	for i := int64(1); i <= 100; i++ {
		th.send(store.Progress{Step: StepDownload, Done: i, Total: 100})
	}
	th.send(store.Progress{Step: StepUnpack, Done: 1, Total: 5})
	th.send(store.Progress{Step: StepUnpack, Done: 2, Total: 5})
	if len(got) != 3 || got[0].Done != 1 || got[1].Done != 100 || got[2].Step != StepUnpack {
		t.Fatalf("throttled reports %+v", got)
	}
}

// mmdebstrap's output carries names from a mirror: whatever it says, a
// report stays within bounds.
func FuzzParseLine(f *testing.F) {
	for _, l := range strings.Split(sampleOutput, "\n") {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := &progressParser{image: "fuzz"}
		for _, l := range append(strings.Split(s, "\n"), s, s) {
			r, ok := p.line(l)
			if !ok {
				continue
			}
			if r.Done < 0 || r.Total < 0 || (r.Total > 0 && r.Done > r.Total) {
				t.Fatalf("report %+v out of bounds for %q", r, l)
			}
			if r.Item != ItemEssential && r.Item != ItemPackages && r.Item != "package lists" && r.Item != "" {
				t.Fatalf("item %q for %q", r.Item, l)
			}
			switch r.Step {
			case StepResolve, StepDownload, StepUnpack, StepConfigure, StepStrip:
			default:
				t.Fatalf("step %q for %q", r.Step, l)
			}
		}
	})
}
