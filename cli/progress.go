package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/internal/image/store"
)

// progressView draws store.Progress reports: a bar per item (a layer, a
// download) on a terminal, plain lines otherwise (a line when an item
// starts and ends, and at most one every few seconds while it goes).
type progressView struct {
	out   io.Writer
	mu    sync.Mutex
	tty   bool
	p     *mpb.Progress
	bars  map[string]*mpb.Bar
	lines map[string]lineState
}

type lineState struct {
	step   string
	last   time.Time
	closed bool
}

// plainEvery is how often a plain line repeats progress on one item.
const plainEvery = 5 * time.Second

// newProgressView draws on w (standard error): as bars when w is a
// terminal and plain is false.
func newProgressView(w *os.File, plain bool) *progressView {
	v := &progressView{out: w, bars: map[string]*mpb.Bar{}, lines: map[string]lineState{}}
	if !plain && term.IsTerminal(int(w.Fd())) {
		v.tty = true
		v.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
	}
	return v
}

// Report is a store.ProgressFunc.
func (v *progressView) Report(p store.Progress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := p.Step + " " + p.Item
	if v.tty {
		v.bar(key, p)
		return
	}
	st, seen := v.lines[key]
	finished := p.Step == "done" || p.Total > 0 && p.Done >= p.Total
	switch {
	case st.closed:
		return
	case !seen, finished, time.Since(st.last) >= plainEvery:
	default:
		return
	}
	fmt.Fprintln(v.out, termText(plainProgress(p)))
	v.lines[key] = lineState{step: p.Step, last: time.Now(), closed: finished}
}

// bar updates the bar of key, making it first.
func (v *progressView) bar(key string, p store.Progress) {
	b, ok := v.bars[key]
	if !ok {
		name := p.Step
		if p.Item != "" {
			name += " " + shortItem(p.Item)
		}
		name = termText(name)
		switch {
		case p.Total > 0 && p.Unit == "items":
			b = v.p.AddBar(p.Total,
				mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
				mpb.AppendDecorators(decor.CountersNoUnit("%d / %d"), decor.Percentage(decor.WCSyncSpace)))
		case p.Total > 0:
			b = v.p.AddBar(p.Total,
				mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
				mpb.AppendDecorators(decor.CountersKibiByte("% .1f / % .1f"), decor.Percentage(decor.WCSyncSpace)))
		default:
			b = v.p.AddSpinner(0,
				mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
				mpb.AppendDecorators(decor.CurrentKibiByte("% .1f")))
		}
		v.bars[key] = b
	}
	if p.Total > 0 && b.Current() == 0 {
		b.SetTotal(p.Total, false)
	}
	b.SetCurrent(p.Done)
	if p.Step == "done" || p.Total > 0 && p.Done >= p.Total {
		b.SetTotal(max(p.Done, 1), true)
	}
}

// Close ends every bar and waits for the last drawing.
func (v *progressView) Close() {
	v.mu.Lock()
	if v.p == nil {
		v.mu.Unlock()
		return
	}
	for _, b := range v.bars {
		if !b.Completed() {
			b.Abort(false)
		}
	}
	p := v.p
	v.p = nil
	v.mu.Unlock()
	p.Wait()
}

// plainProgress is one line of progress for a log.
func plainProgress(p store.Progress) string {
	s := p.Image + ": " + p.Step
	if p.Item != "" {
		s += " " + shortItem(p.Item)
	}
	switch {
	case p.Step == "done":
		return s + fmt.Sprintf(" (%s)", humanBytes(p.Done))
	case p.Total > 0 && p.Unit == "items":
		return s + fmt.Sprintf(" %d of %d (%d%%)", p.Done, p.Total, p.Done*100/p.Total)
	case p.Total > 0:
		return s + fmt.Sprintf(" %s of %s (%d%%)", humanBytes(p.Done), humanBytes(p.Total), p.Done*100/p.Total)
	case p.Done > 0:
		return s + " " + humanBytes(p.Done)
	}
	return s
}

// shortItem shortens a digest to docker's 12 digits.
func shortItem(item string) string {
	if len(item) == 71 && item[:7] == "sha256:" {
		return item[7:19]
	}
	return item
}

// humanBytes writes n in the binary unit that keeps it short.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
