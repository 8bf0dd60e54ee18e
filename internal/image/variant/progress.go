package variant

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// Steps of a build, as Progress.Step says them. A build goes through
// resolve, then download, unpack and configure twice: for Debian's
// essential set (Item "essential set"), then for the rest (Item
// "packages"); then strip, pack and done. Download counts bytes, unpack
// and configure count packages.
const (
	StepResolve   = "resolve"   // apt-get update: the mirror's package lists
	StepDownload  = "download"  // packages, in bytes
	StepUnpack    = "unpack"    // packages unpacked, of those to install
	StepConfigure = "configure" // packages set up, of those to install
	StepStrip     = "strip"     // removing what a sandbox does not need
	StepPack      = "pack"      // the erofs file
	StepDone      = "done"
)

// The two rounds of a build, as Progress.Item says them.
const (
	ItemEssential = "essential set"
	ItemPackages  = "packages"
)

// progressParser turns the lines mmdebstrap --verbose writes (its own
// "I: ..." lines, apt's and dpkg's) into Progress reports. The output
// comes from a tool reading a mirror: anything is possible, and a line
// it does not know is only kept for an error message.
type progressParser struct {
	image string

	step string
	// round is ItemEssential, then ItemPackages; the counts are the
	// round's.
	round      string
	dlDone     int64
	dlTotal    int64
	pkgTotal   int64
	unpacked   int64
	configured int64
}

var (
	// "0 upgraded, 89 newly installed, 0 to remove and 0 not upgraded."
	newlyInstalled = regexp.MustCompile(`^\d+ upgraded, (\d+) newly installed`)
	// "Need to get 38.0 MB of archives." or "Need to get 1,024 kB/50.2 MB of archives."
	needToGet = regexp.MustCompile(`^Need to get ([\d.,]+) ([kMG]?B)[ /]`)
	// "Get:1 http://deb.debian.org/debian bookworm/main amd64 libc6 amd64 2.36-9 [2757 kB]"
	getLine = regexp.MustCompile(`^Get:\d+ \S+ \S+ (?:\S+ )?\S+ \S+ \S+ \[([\d.,]+) ([kMG]?B)\]`)
)

// line reads one line of output and returns the report it makes, if
// any.
func (p *progressParser) line(s string) (store.Progress, bool) {
	s = strings.TrimRight(s, "\r\n")
	if p.round == "" {
		p.round = ItemEssential
	}
	switch {
	case strings.HasPrefix(s, "I: running apt-get update"):
		p.step = StepResolve
		return store.Progress{Image: p.image, Step: StepResolve, Item: "package lists"}, true
	case strings.HasPrefix(s, "I: downloading packages"):
		return p.at(StepDownload), true
	case strings.HasPrefix(s, "I: extracting archives"):
		return p.at(StepUnpack), true
	case strings.HasPrefix(s, "I: installing remaining packages"):
		*p = progressParser{image: p.image, round: ItemPackages}
		return p.at(StepDownload), true
	case strings.HasPrefix(s, "I: cleaning package lists"):
		p.step = StepStrip
		return store.Progress{Image: p.image, Step: StepStrip}, true
	case p.step == "" || p.step == StepResolve:
		// Hooks that run before the download (the merged-/usr one
		// installs a package of its own) are no part of a round.
		return store.Progress{}, false
	case strings.HasPrefix(s, "Unpacking "):
		p.unpacked++
		return p.at(StepUnpack), true
	case strings.HasPrefix(s, "Setting up "):
		p.configured++
		return p.at(StepConfigure), true
	}
	if m := newlyInstalled.FindStringSubmatch(s); m != nil {
		if n, err := strconv.ParseInt(m[1], 10, 32); err == nil {
			p.pkgTotal = n
		}
		return store.Progress{}, false
	}
	if m := needToGet.FindStringSubmatch(s); m != nil {
		p.dlTotal = parseSize(m[1], m[2])
		return p.at(StepDownload), true
	}
	if m := getLine.FindStringSubmatch(s); m != nil {
		p.dlDone = addUp(p.dlDone, parseSize(m[1], m[2]))
		return p.at(StepDownload), true
	}
	return store.Progress{}, false
}

// at moves to step and reports the round's progress in it, with Done
// never past Total.
func (p *progressParser) at(step string) store.Progress {
	p.step = step
	r := store.Progress{Image: p.image, Step: step, Item: p.round}
	switch step {
	case StepDownload:
		r.Done, r.Total = p.dlDone, p.dlTotal
	case StepUnpack:
		r.Done, r.Total, r.Unit = p.unpacked, p.pkgTotal, "items"
	case StepConfigure:
		r.Done, r.Total, r.Unit = p.configured, p.pkgTotal, "items"
	}
	if r.Total > 0 && r.Done > r.Total {
		r.Done = r.Total
	}
	return r
}

// parseSize reads apt's "38.0" "MB" (decimal units, a comma between
// thousands) as bytes; what it cannot read is 0.
func parseSize(num, unit string) int64 {
	f, err := strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
	if err != nil || !(f >= 0) {
		return 0
	}
	switch unit {
	case "kB":
		f *= 1e3
	case "MB":
		f *= 1e6
	case "GB":
		f *= 1e9
	}
	if f > maxSize {
		return 0
	}
	return int64(f)
}

// maxSize bounds a size read from the output (1 PB), and addUp a sum of
// them, so that no count can overflow.
const maxSize = 1e15

func addUp(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// throttle passes reports on to fn, at most one each interval for a
// step and item, but always the first of one and one that ends it.
type throttle struct {
	fn       store.ProgressFunc
	interval time.Duration
	last     time.Time
	step     string
}

func (t *throttle) send(r store.Progress) {
	if t.fn == nil {
		return
	}
	now := time.Now()
	if r.Step+"\x00"+r.Item == t.step && now.Sub(t.last) < t.interval && (r.Total == 0 || r.Done < r.Total) {
		return
	}
	t.step, t.last = r.Step+"\x00"+r.Item, now
	t.fn(r)
}
