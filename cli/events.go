package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/state"
)

// eventsPoll is how often events looks for sandboxes that started.
const eventsPoll = time.Second

// eventTypes are the types --filter type= takes.
var eventTypes = []string{api.EventExec, api.EventFile, api.EventNetwork, api.EventLifecycle}

func (a *app) newEventsCmd() *cobra.Command {
	var (
		filters []string
		asJSON  bool
		format  string
	)
	cmd := &cobra.Command{
		Use:   "events [ID...]",
		Short: "Print what sandboxes do, live: commands, files, network requests, lifecycle",
		Long: `Print the events of running sandboxes as they happen, as docker events
does: each command that ends (exec), each change to a file through a
mount or the file API (file), each DNS answer, connection and request that
leaves or is blocked (network), and each start, pause, resume and stop
(lifecycle). Without IDs, every running sandbox, and those that start
later; with IDs, those, until they have all stopped.

Events are not stored: a sandbox's are printed from the moment this command
reaches its control socket (a sandbox that starts later is reached within a
second, and its start is printed from its record).

--filter type=TYPE keeps one type (exec, file, network, lifecycle; repeat
it for several), --filter blocked=true only what a policy refused. --json
prints each event as one line of the JSON-RPC event's JSON; --format a Go
template of its keys ({{.type}} {{.sandbox_id}} {{.network.host}}).`,
		Example: `  ` + a.name + ` events
  ` + a.name + ` events --filter type=network --filter blocked=true
  ` + a.name + ` events --json web`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseEventFilters(filters)
			if err != nil {
				return err
			}
			var tmpl *template.Template
			if format != "" {
				if tmpl, err = parseRecordTemplate(format); err != nil {
					return err
				}
			}
			store, err := openStore()
			if err != nil {
				return err
			}
			var fixed []string
			for _, ref := range args {
				id, err := store.Resolve(ref)
				if err != nil {
					return err
				}
				fixed = append(fixed, id)
			}
			w := &eventWatcher{
				a: a, store: store, fixed: fixed, filter: f, asJSON: asJSON, tmpl: tmpl,
				conns: map[string]*client.Client{}, forwarded: map[string]chan struct{}{}, names: map[string]string{}, ended: map[string]bool{}, ending: map[string]bool{},
				out: make(chan client.Event, 256),
			}
			return w.run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&filters, "filter", "f", nil, "keep events matching KEY=VALUE (keys: type, blocked)")
	fl.BoolVar(&asJSON, "json", false, "print each event as a line of JSON")
	fl.StringVar(&format, "format", "", `print each event with this Go template ({{.type}} {{.sandbox_id}})`)
	cmd.MarkFlagsMutuallyExclusive("json", "format")
	return cmd
}

// eventFilter is what --filter keeps.
type eventFilter struct {
	types   []string // none: all
	blocked *bool
}

func parseEventFilters(filters []string) (eventFilter, error) {
	var f eventFilter
	for _, s := range filters {
		k, v, ok := strings.Cut(s, "=")
		switch {
		case ok && k == "type" && slices.Contains(eventTypes, v):
			f.types = append(f.types, v)
		case ok && k == "type":
			return f, fmt.Errorf("--filter %q: a type is one of %s", s, strings.Join(eventTypes, ", "))
		case ok && k == "blocked" && (v == "true" || v == "false"):
			b := v == "true"
			f.blocked = &b
		case ok && k == "blocked":
			return f, fmt.Errorf("--filter %q: blocked is true or false", s)
		default:
			return f, fmt.Errorf("--filter %q: want KEY=VALUE with KEY type or blocked", s)
		}
	}
	return f, nil
}

// keep reports whether e passes the filter (its type was asked for at
// the subscription).
func (f eventFilter) keep(e client.Event) bool {
	if f.blocked == nil {
		return true
	}
	blocked := e.File != nil && e.File.Blocked || e.Network != nil && e.Network.Blocked
	return blocked == *f.blocked
}

// eventWatcher follows the events of sandboxes through their control
// sockets.
type eventWatcher struct {
	a      *app
	store  *state.Store
	fixed  []string
	filter eventFilter
	asJSON bool
	tmpl   *template.Template

	conns map[string]*client.Client
	// forwarded is closed when a connection's events are all in out.
	forwarded map[string]chan struct{}
	names     map[string]string
	// ended holds the sandboxes whose end was printed; ending those
	// whose connection closed before their record said how they ended.
	ended  map[string]bool
	ending map[string]bool
	out    chan client.Event
}

func (w *eventWatcher) run(ctx context.Context) error {
	defer func() {
		for _, c := range w.conns {
			c.Close()
		}
	}()
	first := true
	for {
		if err := w.scan(ctx, first); err != nil {
			return err
		}
		first = false
		if len(w.fixed) > 0 && len(w.conns) == 0 && len(w.ending) == 0 && !slices.ContainsFunc(w.fixed, w.running) {
			return nil
		}
		deadline := time.After(eventsPoll)
	drain:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-deadline:
				break drain
			case e := <-w.out:
				if err := w.print(e); err != nil {
					return err
				}
			}
		}
	}
}

// running reports whether sandbox id's record says it runs.
func (w *eventWatcher) running(id string) bool {
	r, err := w.store.Get(id)
	return err == nil && r.Status == state.StatusRunning
}

// scan reaches the running sandboxes it has not reached yet, and prints
// the end of those whose connection closed.
func (w *eventWatcher) scan(ctx context.Context, first bool) error {
	for id, c := range w.conns {
		select {
		case <-c.Done():
			delete(w.conns, id)
			if err := w.drain(id); err != nil {
				return err
			}
			w.ending[id] = true
		default:
		}
	}
	for id := range w.ending {
		if done, err := w.printEnd(id); err != nil {
			return err
		} else if done {
			delete(w.ending, id)
		}
	}
	var recs []state.Record
	if len(w.fixed) > 0 {
		for _, id := range w.fixed {
			if r, err := w.store.Get(id); err == nil {
				recs = append(recs, r)
			}
		}
	} else {
		all, err := w.store.List()
		if err != nil {
			return err
		}
		recs = all
	}
	for _, r := range recs {
		if r.Status != state.StatusRunning || w.conns[r.ID] != nil || w.ended[r.ID] || w.ending[r.ID] {
			continue
		}
		w.names[r.ID] = r.Name
		c, err := dialSandbox(ctx, w.store, r.ID)
		if err != nil {
			continue // stopped meanwhile, or not yet serving: the next scan says
		}
		if err := c.Subscribe(ctx, w.filter.types...); err != nil {
			c.Close()
			continue
		}
		w.conns[r.ID] = c
		if !first && w.wants(api.EventLifecycle) {
			// Started since this command began: its start is in its
			// record, not in the events it sends from now on.
			ev := lifecycleEvent(r.ID, r.CreatedAt.Unix(), api.LifecycleEvent{State: "started"})
			if err := w.print(ev); err != nil {
				return err
			}
		}
		done := make(chan struct{})
		w.forwarded[r.ID] = done
		go func() {
			defer close(done)
			for ev := range c.Events() {
				w.out <- ev
			}
		}()
	}
	return nil
}

func (w *eventWatcher) wants(typ string) bool {
	return len(w.filter.types) == 0 || slices.Contains(w.filter.types, typ)
}

// drain prints what sandbox id sent before its connection closed.
func (w *eventWatcher) drain(id string) error {
	done := w.forwarded[id]
	delete(w.forwarded, id)
	for done != nil {
		select {
		case e := <-w.out:
			if err := w.print(e); err != nil {
				return err
			}
		case <-done:
			done = nil
		}
	}
	return nil
}

// printEnd prints the end of sandbox id from its record, unless its
// events said it, and reports whether nothing is left to print: false
// while its supervisor has not yet recorded the end.
func (w *eventWatcher) printEnd(id string) (bool, error) {
	if w.ended[id] || !w.wants(api.EventLifecycle) {
		return true, nil
	}
	r, err := w.store.Get(id)
	if err != nil {
		return true, nil // removed: nothing says how it ended
	}
	if r.Status == state.StatusRunning {
		return false, nil
	}
	return true, w.print(lifecycleEvent(id, r.StoppedAt.Unix(), api.LifecycleEvent{State: r.Status, Reason: r.Reason}))
}

func lifecycleEvent(id string, ts int64, l api.LifecycleEvent) client.Event {
	b, _ := json.Marshal(l)
	return client.Event{
		Type: api.EventLifecycle, Timestamp: ts, SandboxID: id, Lifecycle: &l,
		Raw: api.Event{Type: api.EventLifecycle, Timestamp: ts, SandboxID: id, Lifecycle: b},
	}
}

// print writes one event, as asked.
func (w *eventWatcher) print(e client.Event) error {
	if e.Lifecycle != nil && (e.Lifecycle.State == state.StatusStopped || e.Lifecycle.State == state.StatusCrashed) {
		if w.ended[e.SandboxID] {
			return nil
		}
		w.ended[e.SandboxID] = true
	}
	if !w.filter.keep(e) {
		return nil
	}
	switch {
	case w.asJSON:
		return writeJSON(e.Raw)
	case w.tmpl != nil:
		b, err := marshalJSON(e.Raw)
		if err != nil {
			return err
		}
		fields, err := decodeFields(b)
		if err != nil {
			return err
		}
		var line strings.Builder
		if err := w.tmpl.Execute(&line, fields); err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		_, err = fmt.Println(termText(line.String()))
		return err
	}
	who := e.SandboxID
	if n := w.names[e.SandboxID]; n != "" {
		who += " (" + n + ")"
	}
	_, err := fmt.Printf("%s %s %s %s\n", e.Time().UTC().Format(time.RFC3339), termText(who), e.Type, termText(eventText(e)))
	return err
}

// eventText is what an event says, in a line.
func eventText(e client.Event) string {
	var b strings.Builder
	blocked := func(is bool, reason string) {
		if is {
			b.WriteString(" BLOCKED")
			if reason != "" {
				b.WriteString(": " + reason)
			}
		}
	}
	switch {
	case e.Exec != nil:
		x := e.Exec
		fmt.Fprintf(&b, "exit %d", x.ExitCode)
		if x.KilledBy != "" {
			fmt.Fprintf(&b, ", killed by %s", x.KilledBy)
		}
		fmt.Fprintf(&b, " after %s: %s", time.Duration(x.DurationMs)*time.Millisecond, argsText(x.Command))
	case e.File != nil:
		f := e.File
		fmt.Fprintf(&b, "%s %s", f.Op, f.Path)
		if f.To != "" {
			fmt.Fprintf(&b, " -> %s", f.To)
		}
		if f.Size > 0 {
			fmt.Fprintf(&b, " (%d bytes)", f.Size)
		}
		blocked(f.Blocked, f.Reason)
	case e.Network != nil:
		n := e.Network
		b.WriteString(n.Kind)
		switch {
		case n.URL != "":
			fmt.Fprintf(&b, " %s %s", n.Method, n.URL)
		case n.Host != "" && n.Port != 0:
			fmt.Fprintf(&b, " %s:%d", n.Host, n.Port)
		case n.Host != "":
			fmt.Fprintf(&b, " %s", n.Host)
		case n.IP != "":
			fmt.Fprintf(&b, " %s:%d", n.IP, n.Port)
		}
		if n.Proto != "" {
			fmt.Fprintf(&b, " %s", n.Proto)
		}
		if n.StatusCode != 0 {
			fmt.Fprintf(&b, " -> %d", n.StatusCode)
		}
		blocked(n.Blocked, n.Reason)
	case e.Lifecycle != nil:
		b.WriteString(e.Lifecycle.State)
		if e.Lifecycle.Reason != "" {
			b.WriteString(": " + e.Lifecycle.Reason)
		}
	default:
		raw, _ := json.Marshal(e.Raw)
		b.Write(raw)
	}
	return b.String()
}

// argsText is a command line as a shell would take it back: words with
// spaces or a shell's special characters single-quoted.
func argsText(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]#~{}!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
