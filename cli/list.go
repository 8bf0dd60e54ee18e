package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/state"
)

func (a *app) newListCmd() *cobra.Command {
	var (
		all, running, asJSON, quiet, noTrunc bool
		filters                              []string
		format                               string
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "ps"},
		Short:   "List running sandboxes; -a lists stopped and crashed ones too",
		Long: `List sandboxes. As docker ps does, it shows running sandboxes; -a shows
every sandbox that has a record, stopped and crashed ones included.

--filter KEY=VALUE keeps the sandboxes that match; repeat it for several
values. Values of one key are alternatives, different keys must all match.
Keys: id (a prefix, with or without "sb-"), name (a part of it), status
(running, paused, stopped or crashed; "exited" is stopped), exited (an exit code),
isolation, image (alias: ancestor) and kind (detached or rpc). A status
filter also finds sandboxes that are not running, without -a.

--format prints a Go template of each record, one line each; its fields are
the JSON's keys ({{.id}}, {{.status}}, {{.supervisor.pid}}). "table " before
the template prints it as columns under a header; "json" prints each record
as one line of JSON.`,
		Example: `  ` + a.name + ` ps
  ` + a.name + ` ps -a --filter status=crashed
  ` + a.name + ` ps --filter name=web --format '{{.id}} {{.status}}'
  ` + a.name + ` rm $(` + a.name + ` ps -aq --filter status=stopped)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			match, err := parseListFilters(filters)
			if err != nil {
				return err
			}
			out, err := newRecordFormat(format)
			if err != nil {
				return err
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			recs, err := store.List()
			if err != nil {
				return err
			}
			showAll := all || len(match["status"]) > 0 || len(match["exited"]) > 0
			recs = slices.DeleteFunc(recs, func(r state.Record) bool {
				return (!showAll || running) && r.Status != state.StatusRunning || !match.keep(r)
			})
			switch {
			case asJSON:
				if recs == nil {
					recs = []state.Record{}
				}
				return writeJSON(recs)
			case quiet:
				for _, r := range recs {
					fmt.Println(termText(r.ID))
				}
				return nil
			case out != nil:
				if err := out.print(recs); err != nil {
					return err
				}
				a.warnDamaged(recs...)
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tIMAGE/ISOLATION\tCREATED\tPID\tCOMMAND\tPORTS\tNAME")
			now := time.Now()
			for _, r := range recs {
				pid := "-"
				if r.Status == state.StatusRunning {
					pid = fmt.Sprint(r.Supervisor.PID)
				}
				where := r.Image + "/" + r.Isolation
				if where == "/" {
					where = "-" // not known: the record is damaged
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termText(r.ID), termText(statusText(r)), termText(where), state.HumanAge(now.Sub(r.CreatedAt)), pid, commandText(r, noTrunc), portsText(r.Ports), termText(r.Name))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			a.warnDamaged(recs...)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&all, "all", "a", false, "also stopped and crashed sandboxes")
	fl.BoolVar(&running, "running", false, "only running sandboxes (the default)")
	_ = fl.MarkHidden("running")
	fl.StringArrayVarP(&filters, "filter", "f", nil, "keep sandboxes matching KEY=VALUE (keys: id, name, status, exited, isolation, image, kind)")
	fl.StringVar(&format, "format", "", `print each record with this Go template ({{.id}} {{.status}}), "table TEMPLATE" or "json"`)
	fl.BoolVar(&asJSON, "json", false, "print the records as one JSON array")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print ids only")
	fl.BoolVar(&noTrunc, "no-trunc", false, "do not shorten commands")
	cmd.MarkFlagsMutuallyExclusive("json", "quiet", "format")
	return cmd
}

// listFilters holds list's --filter values by key.
type listFilters map[string][]string

// statusPaused is the status a filter gives to a running sandbox that is
// paused.
const statusPaused = "paused"

var listFilterKeys = []string{"id", "name", "status", "exited", "isolation", "image", "kind"}

func parseListFilters(args []string) (listFilters, error) {
	m := listFilters{}
	for _, f := range args {
		k, v, ok := strings.Cut(f, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if k == "ancestor" {
			k = "image"
		}
		if !ok || !slices.Contains(listFilterKeys, k) {
			return nil, fmt.Errorf("--filter %q: want KEY=VALUE with KEY one of %s", f, strings.Join(listFilterKeys, ", "))
		}
		switch k {
		case "status":
			if v == "exited" {
				v = state.StatusStopped
			}
			if v != state.StatusRunning && v != statusPaused && v != state.StatusStopped && v != state.StatusCrashed {
				return nil, fmt.Errorf("--filter %q: a status is running, paused, stopped (or exited) or crashed", f)
			}
		case "exited":
			if _, err := strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("--filter %q: exited takes an exit code, such as exited=0", f)
			}
		}
		m[k] = append(m[k], v)
	}
	return m, nil
}

// keep reports whether r matches every key, and one of each key's values.
func (m listFilters) keep(r state.Record) bool {
	for k, vs := range m {
		if !slices.ContainsFunc(vs, func(v string) bool { return filterMatch(k, v, r) }) {
			return false
		}
	}
	return true
}

func filterMatch(key, v string, r state.Record) bool {
	switch key {
	case "id":
		return strings.HasPrefix(r.ID, v) || strings.HasPrefix(strings.TrimPrefix(r.ID, "sb-"), v)
	case "name":
		return r.Name != "" && strings.Contains(r.Name, v)
	case "status":
		// As docker's: a paused sandbox is paused, not running.
		if r.Status == state.StatusRunning && (v == statusPaused || v == state.StatusRunning) {
			return (v == statusPaused) == r.Paused
		}
		return r.Status == v
	case "exited":
		return r.ExitCode != nil && strconv.Itoa(*r.ExitCode) == v
	case "isolation":
		return r.Isolation == v
	case "image":
		return r.Image == v
	case "kind":
		return r.Kind == v
	}
	return false
}

// recordFormat prints records through a --format template.
type recordFormat struct {
	tmpl   *template.Template // nil for "json"
	header *template.Template // for "table ..."
}

// newRecordFormat parses --format; it returns nil for an empty one.
func newRecordFormat(format string) (*recordFormat, error) {
	switch {
	case format == "":
		return nil, nil
	case format == "json":
		return &recordFormat{}, nil
	}
	text, table := strings.CutPrefix(format, "table ")
	t, err := parseRecordTemplate(text)
	if err != nil {
		return nil, err
	}
	f := &recordFormat{tmpl: t}
	if table {
		f.header = t
	}
	return f, nil
}

func (f *recordFormat) print(recs []state.Record) error {
	if f.tmpl == nil {
		for _, r := range recs {
			if err := writeJSON(r); err != nil {
				return err
			}
		}
		return nil
	}
	var out bytes.Buffer
	if f.header != nil {
		if err := f.header.Execute(&out, recordHeader()); err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		out.WriteByte('\n')
	}
	for _, r := range recs {
		fields, err := recordFields(r)
		if err != nil {
			return err
		}
		var line bytes.Buffer
		if err := f.tmpl.Execute(&line, fields); err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		out.WriteString(termColumns(line.String()))
		out.WriteByte('\n')
	}
	if f.header == nil {
		_, err := os.Stdout.Write(out.Bytes())
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	if _, err := tw.Write(out.Bytes()); err != nil {
		return err
	}
	return tw.Flush()
}

// parseRecordTemplate parses a --format template of a record.
func parseRecordTemplate(text string) (*template.Template, error) {
	// Docker users write \t for a column break.
	text = strings.ReplaceAll(text, `\t`, "\t")
	t, err := template.New("format").Funcs(template.FuncMap{"json": templateJSON}).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("--format: %w", err)
	}
	return t.Option("missingkey=zero"), nil
}

// recordFields is what a --format template sees of r: its JSON's keys.
func recordFields(r state.Record) (map[string]any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return decodeFields(b)
}

// decodeFields is a JSON object as a template sees it.
func decodeFields(b []byte) (map[string]any, error) {
	var fields map[string]any
	err := json.Unmarshal(b, &fields)
	return fields, err
}

// recordHeader is what a "table" template prints as its header: every key
// of a record, its value the key's name in capitals.
func recordHeader() map[string]any {
	return map[string]any{
		"id": "ID", "name": "NAME", "status": "STATUS", "isolation": "ISOLATION", "image": "IMAGE",
		"command": "COMMAND", "created_at": "CREATED", "stopped_at": "STOPPED", "exit_code": "EXIT CODE",
		"reason": "REASON", "kind": "KIND", "config": "CONFIG", "damaged": "DAMAGED",
		"supervisor": map[string]any{"pid": "PID", "start_time": "START TIME"},
	}
}

// termColumns is a template's line made safe for a terminal, with its tabs
// kept as the column breaks they are.
func termColumns(line string) string {
	cols := strings.Split(line, "\t")
	for i, c := range cols {
		cols[i] = termText(c)
	}
	return strings.Join(cols, "\t")
}

// portsText is a record's published ports as docker ps shows them:
// 127.0.0.1:8080->8000/tcp, comma-separated; "-" for none.
func portsText(ports []state.Port) string {
	if len(ports) == 0 {
		return "-"
	}
	out := make([]string, len(ports))
	for i, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		out[i] = fmt.Sprintf("%s->%d/%s", net.JoinHostPort(p.HostIP, strconv.Itoa(int(p.HostPort))), p.SandboxPort, proto)
	}
	return termText(strings.Join(out, ", "))
}
