// Package qmp speaks QEMU's machine protocol (QMP) on a unix socket: the
// greeting, capability negotiation, commands answered in order, and the
// events QEMU sends in between.
//
// It is written here rather than taken from digitalocean/go-qemu: that
// module's qmp package brings go-libvirt with it, runs one command at a
// time without matching answers to requests by id, and drops events
// nobody reads. What the vm boundary needs is smaller: a bounded reader
// for a VMM that is itself behind a sandbox, commands matched by id, and
// events that never block the reader.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// maxMessage bounds one message from QEMU: the biggest answers the vm
// boundary asks for (query-status, query-cpus-fast) are a few KiB.
const maxMessage = 1 << 20

// eventBuffer bounds the events waiting for a reader; past it, events are
// dropped and counted.
const eventBuffer = 64

// Event is an asynchronous message from QEMU ("SHUTDOWN", "STOP", ...).
type Event struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data,omitempty"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// Error is QEMU's refusal of a command.
type Error struct {
	Command string
	Class   string `json:"class"`
	Desc    string `json:"desc"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// ErrClosed is returned for commands on a monitor whose connection ended.
var ErrClosed = errors.New("qmp: the connection to QEMU is closed")

// Monitor is a QMP connection. Its methods are safe for concurrent use.
type Monitor struct {
	conn net.Conn

	mu      sync.Mutex
	nextID  uint64
	waiting map[string]chan response
	err     error // why the connection ended
	wmu     sync.Mutex

	events  chan Event
	dropped uint64
	done    chan struct{}
}

type response struct {
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
	ID     json.RawMessage `json:"id"`
	Event  string          `json:"event"`
}

// Dial connects to QEMU's QMP socket at path, reads the greeting and
// negotiates capabilities.
func Dial(ctx context.Context, path string) (*Monitor, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connect to %s: %w", path, err)
	}
	m := &Monitor{conn: conn, waiting: map[string]chan response{}, events: make(chan Event, eventBuffer), done: make(chan struct{})}
	r := bufio.NewReaderSize(conn, 64<<10)
	// The greeting: {"QMP": {"version": ..., "capabilities": [...]}}.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	line, err := readLine(r)
	stop()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: read QEMU's greeting on %s: %w", path, err)
	}
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := json.Unmarshal(line, &greeting); err != nil || greeting.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: %s did not greet as QEMU's monitor does: %.80q", path, line)
	}
	go m.read(r)
	if _, err := m.Execute(ctx, "qmp_capabilities", nil); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// readLine reads one message, bounded.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		if len(line)+len(part) > maxMessage {
			return nil, fmt.Errorf("a message longer than %d bytes", maxMessage)
		}
		line = append(line, part...)
		if !isPrefix {
			return line, nil
		}
	}
}

// read delivers answers to their commands and events to Events, until
// the connection ends.
func (m *Monitor) read(r *bufio.Reader) {
	var err error
	defer func() {
		m.mu.Lock()
		if m.err == nil {
			m.err = fmt.Errorf("%w: %v", ErrClosed, err)
		}
		for id, ch := range m.waiting {
			close(ch)
			delete(m.waiting, id)
		}
		m.mu.Unlock()
		close(m.events)
		close(m.done)
	}()
	for {
		var line []byte
		if line, err = readLine(r); err != nil {
			return
		}
		var resp response
		if err = json.Unmarshal(line, &resp); err != nil {
			err = fmt.Errorf("a message that is not JSON: %w", err)
			return
		}
		if resp.Event != "" {
			var ev Event
			if json.Unmarshal(line, &ev) == nil {
				select {
				case m.events <- ev:
				default:
					m.mu.Lock()
					m.dropped++
					m.mu.Unlock()
				}
			}
			continue
		}
		var id string
		if json.Unmarshal(resp.ID, &id) != nil {
			continue // an answer to nothing asked
		}
		m.mu.Lock()
		ch := m.waiting[id]
		delete(m.waiting, id)
		m.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// Execute runs a command with its arguments (nil for none) and returns
// QEMU's "return" value.
func (m *Monitor) Execute(ctx context.Context, command string, args any) (json.RawMessage, error) {
	m.mu.Lock()
	if m.err != nil {
		err := m.err
		m.mu.Unlock()
		return nil, err
	}
	m.nextID++
	id := strconv.FormatUint(m.nextID, 10)
	ch := make(chan response, 1)
	m.waiting[id] = ch
	m.mu.Unlock()
	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		m.forget(id)
		return nil, fmt.Errorf("qmp %s: encode its arguments: %w", command, err)
	}
	m.wmu.Lock()
	_, err = m.conn.Write(append(b, '\n'))
	m.wmu.Unlock()
	if err != nil {
		m.forget(id)
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			m.mu.Lock()
			err := m.err
			m.mu.Unlock()
			return nil, fmt.Errorf("qmp %s: %w", command, err)
		}
		if resp.Error != nil {
			resp.Error.Command = command
			return nil, resp.Error
		}
		return resp.Return, nil
	case <-ctx.Done():
		m.forget(id)
		return nil, fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	}
}

func (m *Monitor) forget(id string) {
	m.mu.Lock()
	delete(m.waiting, id)
	m.mu.Unlock()
}

// Events delivers QEMU's events until the connection ends (then it is
// closed). Events that find it full are dropped (see Dropped).
func (m *Monitor) Events() <-chan Event { return m.events }

// Dropped counts the events dropped because Events was full.
func (m *Monitor) Dropped() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

// Done is closed when the connection has ended.
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Close ends the connection; QEMU goes on.
func (m *Monitor) Close() error {
	m.mu.Lock()
	if m.err == nil {
		m.err = ErrClosed
	}
	m.mu.Unlock()
	err := m.conn.Close()
	<-m.done
	return err
}

// Status is the answer of query-status.
type Status struct {
	Running bool   `json:"running"`
	Status  string `json:"status"`
}

// QueryStatus asks whether the guest runs.
func (m *Monitor) QueryStatus(ctx context.Context) (Status, error) {
	raw, err := m.Execute(ctx, "query-status", nil)
	if err != nil {
		return Status{}, err
	}
	var s Status
	if err := json.Unmarshal(raw, &s); err != nil {
		return Status{}, fmt.Errorf("qmp query-status: %w", err)
	}
	return s, nil
}
