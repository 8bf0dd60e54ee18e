package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// zmsg is the message exchanged with the spawner over a SOCK_SEQPACKET
// socket; stdio descriptors ride along as SCM_RIGHTS on spawn requests.
type zmsg struct {
	Op    string   `cbor:"op"`
	ID    uint64   `cbor:"id"`
	Argv  []string `cbor:"argv,omitempty"`
	Env   []string `cbor:"env,omitempty"`
	Dir   string   `cbor:"dir,omitempty"`
	TTY   bool     `cbor:"tty,omitempty"`
	Cred  *zcred   `cbor:"cred,omitempty"`
	Sig   int      `cbor:"sig,omitempty"`
	Tree  bool     `cbor:"tree,omitempty"`
	Pid   int      `cbor:"pid,omitempty"`
	Err   string   `cbor:"err,omitempty"`
	Code  string   `cbor:"code,omitempty"`
	Notes []string `cbor:"notes,omitempty"`
	WS    uint32   `cbor:"ws,omitempty"`
	CPUNs int64    `cbor:"cpu,omitempty"`
	RSS   int64    `cbor:"rss,omitempty"`
	// Procs and More answer a "ps" request.
	Procs []agentproto.Process `cbor:"procs,omitempty"`
	More  int                  `cbor:"more,omitempty"`
}

// zcred is who a spawned command runs as.
type zcred struct {
	UID    uint32   `cbor:"u"`
	GID    uint32   `cbor:"g"`
	Groups []uint32 `cbor:"gs,omitempty"`
}

// Messages are bounded by the socket buffer; this is the largest spawn
// request (argv plus environment) that is accepted.
const maxSpawnMsg = 160 << 10

// zclient talks to the spawner process.
type zclient struct {
	conn   *net.UnixConn
	wmu    sync.Mutex
	nextID atomic.Uint64

	mu       sync.Mutex
	pending  map[uint64]chan zmsg
	children map[uint64]*zchild
	dead     error
	done     chan struct{}
	// notes is what the spawner could not confine, from its ready message.
	notes []string
	// pid is the spawner's process id, in the agent's PID namespace.
	pid int
}

// newZClient waits for the spawner to report that its setup finished, then
// serves it.
func newZClient(conn *net.UnixConn) (*zclient, error) {
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(agentproto.SpawnerSetupTimeout))
	n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		conn.Close()
		return nil, fmt.Errorf("the process spawner did not finish its setup within %s", agentproto.SpawnerSetupTimeout)
	case err != nil || n == 0:
		conn.Close()
		return nil, fmt.Errorf("the process spawner exited during setup (%v)", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	var r zmsg
	if err := agentproto.Unmarshal(buf[:n], &r); err != nil || r.Op != "ready" {
		conn.Close()
		return nil, errors.New("the process spawner sent a malformed ready message")
	}
	if r.Err != "" {
		conn.Close()
		return nil, fmt.Errorf("confine user processes: %s", r.Err)
	}
	z := &zclient{
		conn:     conn,
		pending:  map[uint64]chan zmsg{},
		children: map[uint64]*zchild{},
		done:     make(chan struct{}),
		notes:    r.Notes,
	}
	go z.readLoop()
	return z, nil
}

func (z *zclient) send(m zmsg, fds []int) error {
	b, err := cbor.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxSpawnMsg {
		return fmt.Errorf("command line and environment take %d bytes, more than the %d KiB limit", len(b), maxSpawnMsg>>10)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	z.wmu.Lock()
	defer z.wmu.Unlock()
	_, _, err = z.conn.WriteMsgUnix(b, oob, nil)
	return err
}

func (z *zclient) readLoop() {
	buf := make([]byte, 64<<10)
	var err error
	for {
		var n int
		n, _, _, _, err = z.conn.ReadMsgUnix(buf, nil)
		if err != nil {
			break
		}
		if n == 0 {
			err = errors.New("spawner closed its socket")
			break
		}
		var m zmsg
		if derr := agentproto.Unmarshal(buf[:n], &m); derr != nil {
			continue
		}
		z.mu.Lock()
		switch m.Op {
		case "spawned", "ps":
			if ch, ok := z.pending[m.ID]; ok {
				delete(z.pending, m.ID)
				ch <- m
			}
		case "exit":
			if c, ok := z.children[m.ID]; ok {
				delete(z.children, m.ID)
				c.finish(m)
			}
		}
		z.mu.Unlock()
	}
	z.mu.Lock()
	z.dead = fmt.Errorf("the sandbox's process spawner exited: %w", err)
	for id, ch := range z.pending {
		ch <- zmsg{Err: z.dead.Error()}
		delete(z.pending, id)
	}
	for id, c := range z.children {
		// The spawner is PID 1 of the user processes' namespace: when it
		// dies the kernel kills all of them.
		c.finish(zmsg{WS: uint32(syscall.SIGKILL)})
		delete(z.children, id)
	}
	z.mu.Unlock()
	close(z.done)
}

// Spawn implements Spawner.
func (z *zclient) Spawn(req SpawnRequest, stdio [3]*os.File) (Child, error) {
	id := z.nextID.Add(1)
	ch := make(chan zmsg, 1)
	c := &zchild{z: z, id: id, done: make(chan struct{})}
	z.mu.Lock()
	if z.dead != nil {
		z.mu.Unlock()
		return nil, z.dead
	}
	z.pending[id] = ch
	z.children[id] = c
	z.mu.Unlock()
	fds := []int{int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd())}
	m := zmsg{Op: "spawn", ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir, TTY: req.TTY}
	if req.Cred != nil {
		m.Cred = &zcred{UID: req.Cred.UID, GID: req.Cred.GID, Groups: req.Cred.Groups}
	}
	err := z.send(m, fds)
	if err != nil {
		z.mu.Lock()
		delete(z.pending, id)
		delete(z.children, id)
		z.mu.Unlock()
		return nil, err
	}
	r := <-ch
	if r.Err != "" {
		z.mu.Lock()
		delete(z.children, id)
		z.mu.Unlock()
		if r.Code != "" {
			return nil, agentproto.Errorf(agentproto.Code(r.Code), r.Err)
		}
		return nil, errors.New(r.Err)
	}
	c.pid = r.Pid
	return c, nil
}

type zchild struct {
	z    *zclient
	id   uint64
	pid  int
	once sync.Once
	done chan struct{}
	st   ExitStatus
}

func (c *zchild) finish(m zmsg) {
	c.once.Do(func() {
		c.st = ExitStatus{Status: syscall.WaitStatus(m.WS), CPUTime: durationNs(m.CPUNs), PeakRSS: m.RSS}
		close(c.done)
	})
}

func (c *zchild) Pid() int              { return c.pid }
func (c *zchild) Done() <-chan struct{} { return c.done }
func (c *zchild) Status() ExitStatus    { return c.st }
func (c *zchild) Signal(sig syscall.Signal) error {
	return c.z.send(zmsg{Op: "kill", ID: c.id, Sig: int(sig)}, nil)
}
func (c *zchild) KillTree() error {
	return c.z.send(zmsg{Op: "kill", ID: c.id, Sig: int(syscall.SIGKILL), Tree: true}, nil)
}
