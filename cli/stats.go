package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// statsInterval is how often stats reads its sandboxes, and how far apart
// the two readings of --no-stream are.
const statsInterval = time.Second

// sandboxStats is one row of stats: a reading and the CPU share since the
// one before it.
type sandboxStats struct {
	ID         string  `json:"id"`
	Name       string  `json:"name,omitempty"`
	CPUPercent float64 `json:"cpu_percent"`
	api.Usage
	// MemoryPercent is MemoryBytes of MemoryLimitBytes; 0 without one.
	MemoryPercent float64 `json:"memory_percent"`
	// Error says why the sandbox could not be read this time.
	Error string `json:"error,omitempty"`
}

func (a *app) newStatsCmd() *cobra.Command {
	var (
		noStream, all, asJSON bool
		format                string
	)
	cmd := &cobra.Command{
		Use:   "stats [ID...]",
		Short: "Show what running sandboxes use, live: CPU, memory, processes, network",
		Long: `Show what running sandboxes use, as docker stats does, read from their
cgroups every second: CPU (100% is one core), memory against its limit,
processes and threads against theirs, the bytes their network interface
received and sent, and the memory and pids limits' kills and refusals.
Without IDs, every running sandbox; sandboxes that start later join the
table.

--no-stream prints one table and returns. --json prints each reading as
one JSON line (with --no-stream, one array); --format takes a Go template
of its keys ({{.id}} {{.cpu_percent}} {{.memory_bytes}}), with "table "
for columns under a header.`,
		Example: `  ` + a.name + ` stats
  ` + a.name + ` stats --no-stream web
  ` + a.name + ` stats --no-stream --format '{{.name}} {{.memory_bytes}}'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var tmpl *template.Template
			table := false
			if format != "" {
				text, isTable := strings.CutPrefix(format, "table ")
				t, err := parseRecordTemplate(text)
				if err != nil {
					return err
				}
				tmpl, table = t, isTable
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			var fixed []string
			for _, prefix := range args {
				id, err := store.Resolve(prefix)
				if err != nil {
					return err
				}
				fixed = append(fixed, id)
			}
			s := &statsReader{store: store, ids: fixed, conns: map[string]*client.Client{}, last: map[string]api.Usage{}}
			defer s.close()
			ctx := cmd.Context()
			// A first reading, for the CPU share of the first row.
			if _, err := s.read(ctx); err != nil {
				return err
			}
			wait := statsInterval / 2
			clear := term.IsTerminal(int(os.Stdout.Fd())) && !asJSON
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
				wait = statsInterval
				rows, err := s.read(ctx)
				if err != nil {
					return err
				}
				if noStream {
					return a.printStats(rows, asJSON, tmpl, table, false, false)
				}
				if err := a.printStats(rows, asJSON, tmpl, table, clear, true); err != nil {
					return err
				}
				if len(fixed) > 0 && !slices.ContainsFunc(rows, func(r sandboxStats) bool { return r.Error == "" }) {
					return errors.New("none of the sandboxes named runs any more")
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&noStream, "no-stream", false, "print one reading and return")
	fl.BoolVarP(&all, "all", "a", false, "accepted for docker's habit: stopped sandboxes use nothing, so only running ones are shown")
	fl.BoolVar(&asJSON, "json", false, "print JSON: a line per sandbox and reading (with --no-stream, one array)")
	fl.StringVar(&format, "format", "", `print each row with this Go template ({{.id}} {{.cpu_percent}}), or "table TEMPLATE"`)
	cmd.MarkFlagsMutuallyExclusive("json", "format")
	return cmd
}

// statsReader reads the usage of sandboxes through their control sockets,
// which it keeps open between readings.
type statsReader struct {
	store *state.Store
	ids   []string // the sandboxes named; none: every running one
	conns map[string]*client.Client
	last  map[string]api.Usage
}

func (s *statsReader) close() {
	for _, c := range s.conns {
		c.Close()
	}
}

// read takes one reading of each sandbox.
func (s *statsReader) read(ctx context.Context) ([]sandboxStats, error) {
	ids := s.ids
	names := map[string]string{}
	if len(ids) == 0 {
		recs, err := s.store.List()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Status == state.StatusRunning {
				ids = append(ids, r.ID)
				names[r.ID] = r.Name
			}
		}
	} else {
		for _, id := range ids {
			if r, err := s.store.Get(id); err == nil {
				names[id] = r.Name
			}
		}
	}
	rows := make([]sandboxStats, 0, len(ids))
	for _, id := range ids {
		row := sandboxStats{ID: id, Name: names[id]}
		u, err := s.usage(ctx, id)
		if err != nil {
			row.Error = err.Error()
			rows = append(rows, row)
			continue
		}
		row.Usage = *u
		if prev, ok := s.last[id]; ok && u.Time.After(prev.Time) && u.CPUNanos >= prev.CPUNanos {
			row.CPUPercent = float64(u.CPUNanos-prev.CPUNanos) / float64(u.Time.Sub(prev.Time).Nanoseconds()) * 100
		}
		if u.MemoryLimitBytes > 0 {
			row.MemoryPercent = float64(u.MemoryBytes) / float64(u.MemoryLimitBytes) * 100
		}
		s.last[id] = *u
		rows = append(rows, row)
	}
	return rows, nil
}

func (s *statsReader) usage(ctx context.Context, id string) (*api.Usage, error) {
	c := s.conns[id]
	if c == nil {
		r, err := s.store.Get(id)
		if err != nil {
			return nil, err
		}
		if r.Status != state.StatusRunning {
			return nil, fmt.Errorf("%s, not running", r.Status)
		}
		if c, err = dialSandbox(ctx, s.store, id); err != nil {
			return nil, err
		}
		s.conns[id] = c
	}
	u, err := c.Sandbox(id).Usage(ctx)
	if err != nil {
		// The sandbox may have stopped: dial again next time.
		c.Close()
		delete(s.conns, id)
		if errors.Is(err, client.ErrUnsupported) {
			return nil, fmt.Errorf("no figures: the sandbox has no cgroup (airlock doctor says why)")
		}
		return nil, err
	}
	return u, nil
}

func (a *app) printStats(rows []sandboxStats, asJSON bool, tmpl *template.Template, table, clear, stream bool) error {
	switch {
	case asJSON && stream:
		for _, r := range rows {
			if err := writeJSON(r); err != nil {
				return err
			}
		}
		return nil
	case asJSON:
		return writeJSON(rows)
	}
	var out bytes.Buffer
	if clear {
		out.WriteString("\x1b[2J\x1b[H")
	}
	tw := tabwriter.NewWriter(&out, 0, 4, 3, ' ', 0)
	if tmpl != nil {
		if table {
			if err := tmpl.Execute(tw, statsHeader()); err != nil {
				return fmt.Errorf("--format: %w", err)
			}
			fmt.Fprintln(tw)
		}
		for _, r := range rows {
			fields, err := statsFields(r)
			if err != nil {
				return err
			}
			var line bytes.Buffer
			if err := tmpl.Execute(&line, fields); err != nil {
				return fmt.Errorf("--format: %w", err)
			}
			fmt.Fprintln(tw, termColumns(line.String()))
		}
	} else {
		fmt.Fprintln(tw, "ID\tNAME\tCPU %\tMEM USAGE / LIMIT\tMEM %\tPIDS\tNET I/O\tOOM KILLS")
		for _, r := range rows {
			if r.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", termText(r.ID), termText(r.Name), termText(r.Error))
				continue
			}
			limit, memPct := "-", "-"
			if r.MemoryLimitBytes > 0 {
				limit, memPct = sizeText(r.MemoryLimitBytes), fmt.Sprintf("%.2f%%", r.MemoryPercent)
			}
			pids := fmt.Sprint(r.Pids)
			if r.PidsLimit > 0 {
				pids += fmt.Sprintf(" / %d", r.PidsLimit)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%s / %s\t%s\t%s\t%s / %s\t%d\n", termText(r.ID), termText(r.Name), r.CPUPercent,
				sizeText(r.MemoryBytes), limit, memPct, pids, sizeText(r.NetRxBytes), sizeText(r.NetTxBytes), r.OOMKills)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := os.Stdout.Write(out.Bytes())
	return err
}

// statsFields is what a stats --format template sees: the JSON's keys.
func statsFields(r sandboxStats) (map[string]any, error) {
	b, err := marshalJSON(r)
	if err != nil {
		return nil, err
	}
	return decodeFields(b)
}

func statsHeader() map[string]any {
	h := map[string]any{}
	for _, k := range []string{"id", "name", "cpu_percent", "time", "cpu_nanos", "cpus", "memory_bytes", "memory_peak_bytes",
		"memory_limit_bytes", "memory_percent", "pids", "pids_limit", "oom_kills", "pids_limit_hits", "net_rx_bytes", "net_tx_bytes", "error"} {
		h[k] = strings.ToUpper(strings.ReplaceAll(k, "_", " "))
	}
	return h
}

// sizeText is a byte count as docker prints one: 12.5MiB, 1.2GiB, 512B.
func sizeText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n), 0
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.4g%ciB", v, "KMGTPE"[i-1])
}
