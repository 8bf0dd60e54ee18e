package doctor

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the report for people: one line per level (✓ or ✗,
// name, reason), followed by its checks, indented, with a fix line under
// every check that is not ok.
func (r Report) WriteText(w io.Writer) error {
	h := r.Host
	kernel := h.Kernel
	if h.Distro != "" {
		kernel += ", " + h.Distro
	}
	if _, err := fmt.Fprintf(w, "host: %s/%s, kernel %s, uid %d, %d CPUs\n", h.OS, h.Arch, kernel, h.UID, h.CPUs); err != nil {
		return err
	}
	for _, l := range r.Levels {
		mark, reason := "✗", l.Reason
		if l.Works {
			mark, reason = "✓", fmt.Sprintf("works (sandbox started in %d ms)", l.TryMillis)
		}
		if _, err := fmt.Fprintf(w, "\n%s %-8s %s\n", mark, l.Name, reason); err != nil {
			return err
		}
		writeFix(w, "           ", l.Fix)

		// The fix rows end in a cell without a trailing tab, so their
		// length does not widen the name column.
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range l.Checks {
			fmt.Fprintf(tw, "    %s\t%s\t%s\n", c.Status, c.Name, c.Detail)
			if c.Status != OK {
				writeFix(tw, "    \t\t", c.Fix)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// writeFix writes a possibly multi-line fix, prefixing its first line with
// "fix: " and aligning the rest under it.
func writeFix(w io.Writer, indent, fix string) {
	if fix == "" {
		return
	}
	for i, line := range strings.Split(fix, "\n") {
		prefix := "fix: "
		if i > 0 {
			prefix = "     "
		}
		fmt.Fprintf(w, "%s%s%s\n", indent, prefix, line)
	}
}
