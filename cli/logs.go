package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/outlog"
	"github.com/airlock-sandbox/airlock/internal/state"
)

func (a *app) newLogsCmd() *cobra.Command {
	var (
		follow, stamps bool
		tail           int
		since, until   string
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the output of a detached sandbox's main command",
		Long: `Print the output of a detached sandbox's main command from its log (the
first 64 MiB), as docker logs does: what the command wrote to stdout goes to
stdout, and what it wrote to stderr to stderr (with a TTY, both are one
stream, on stdout).

--tail N prints only the last N lines; --since and --until keep the lines
that started from or before a time: a duration ago (10m, 1h30m), an RFC 3339
time (2026-11-28T10:00:00Z) or Unix seconds. -t prints each line's time
first. -f follows the output until the sandbox stops.`,
		Example: `  ` + a.name + ` logs web
  ` + a.name + ` logs --tail 20 -f web
  ` + a.name + ` logs --since 10m -t web 2>/dev/null    # stdout only, with times`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			from, err := parseLogTime("--since", since, now)
			if err != nil {
				return err
			}
			to, err := parseLogTime("--until", until, now)
			if err != nil {
				return err
			}
			store, id, err := resolveSandbox(args[0])
			if err != nil {
				return err
			}
			r, err := outlog.Open(store.LogPath(id))
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("sandbox %s has no log: only sandboxes started with a command by airlock run --detach have one", id)
			}
			if err != nil {
				return err
			}
			defer r.Close()
			p := logPrinter{stdout: os.Stdout, stderr: os.Stderr, stamps: stamps, from: from, to: to}
			rec, err := store.Get(id)
			if err != nil {
				return err
			}
			ended := rec.Status != state.StatusRunning
			pieces, err := r.Next(ended)
			if err != nil {
				return err
			}
			pieces = p.keep(pieces)
			if tail >= 0 {
				pieces = lastLines(pieces, tail)
			}
			if err := p.print(pieces); err != nil || !follow || ended {
				return err
			}
			// Follow while the sandbox runs, then print what came last.
			ctx := cmd.Context()
			for {
				rec, err := store.Get(id)
				if err != nil {
					return err
				}
				ended := rec.Status != state.StatusRunning
				pieces, err := r.Next(ended)
				if err != nil {
					return err
				}
				if err := p.print(p.keep(pieces)); err != nil || ended {
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing output until the sandbox stops")
	fl.IntVarP(&tail, "tail", "n", -1, "print only the last N lines of what is there (-1: all)")
	fl.StringVar(&since, "since", "", "only lines from this time on: a duration ago (10m), an RFC 3339 time or Unix seconds")
	fl.StringVar(&until, "until", "", "only lines before this time: a duration ago (10m), an RFC 3339 time or Unix seconds")
	fl.BoolVarP(&stamps, "timestamps", "t", false, "print each line's time (RFC 3339, nanoseconds) first")
	return cmd
}

// parseLogTime reads a --since or --until value as docker logs takes it.
func parseLogTime(flag, v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.Local); err == nil {
			return t, nil
		}
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 && secs < 1<<40 {
		return time.Unix(0, int64(secs*1e9)), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: give a duration ago (10m, 1h30m), an RFC 3339 time (2026-11-28T10:00:00Z) or Unix seconds", flag, v)
}

// logPrinter writes the pieces of a log each to its stream.
type logPrinter struct {
	stdout, stderr io.Writer
	stamps         bool
	from, to       time.Time
}

// keep drops the pieces of lines outside --since and --until.
func (p logPrinter) keep(ps []outlog.Piece) []outlog.Piece {
	if p.from.IsZero() && p.to.IsZero() {
		return ps
	}
	out := ps[:0]
	for _, x := range ps {
		if (p.from.IsZero() || !x.Time.Before(p.from)) && (p.to.IsZero() || x.Time.Before(p.to)) {
			out = append(out, x)
		}
	}
	return out
}

func (p logPrinter) print(ps []outlog.Piece) error {
	for _, x := range ps {
		w := p.stdout
		if x.Stream == outlog.Stderr {
			w = p.stderr
		}
		if p.stamps && x.LineStart {
			if _, err := io.WriteString(w, x.Time.UTC().Format(time.RFC3339Nano)+" "); err != nil {
				return err
			}
		}
		if _, err := w.Write(x.Data); err != nil {
			return err
		}
	}
	return nil
}

// lastLines keeps the pieces of the last n lines, counted over both
// streams as they came; a last line without its newline counts as a line.
func lastLines(ps []outlog.Piece, n int) []outlog.Piece {
	if n == 0 {
		return nil
	}
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].LineStart {
			if n--; n == 0 {
				return ps[i:]
			}
		}
	}
	return ps
}
