package owners

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
	"github.com/airlock-sandbox/airlock/internal/image/store"
	"github.com/airlock-sandbox/airlock/internal/image/untar"
	"github.com/airlock-sandbox/airlock/internal/subid"
)

// NotKeptError says why an unprivileged caller's image trees give every
// file to the caller.
type NotKeptError struct{ Why string }

func (e *NotKeptError) Error() string {
	return "images pulled without root give every file to you: " + e.Why
}

// Detect returns how this process's image trees are made, which is
// never nil: store.Local() for root; a Mapped for a caller that has
// subordinate ids covering every id an image may use (1 to
// untar.MaxID) and the set-id helpers to map them, with agent, the
// agent binary, as the worker; otherwise store.Local() and a
// *NotKeptError saying why files will not keep their owners.
func Detect(agent string) (store.Owners, error) {
	if os.Geteuid() == 0 {
		return store.Local(), nil
	}
	uid, gid := os.Getuid(), os.Getgid()
	ids, err := subid.Lookup(uid)
	if err != nil {
		return store.Local(), &NotKeptError{Why: err.Error()}
	}
	if ids.UID.Count < untar.MaxID || ids.GID.Count < untar.MaxID {
		return store.Local(), &NotKeptError{Why: fmt.Sprintf("your subordinate ids (%d uids, %d gids) do not cover the %d an image's files may use", ids.UID.Count, ids.GID.Count, untar.MaxID)}
	}
	if agent == "" {
		return store.Local(), &NotKeptError{Why: "the agent binary, which does the work, was not found"}
	}
	m := &Mapped{agent: agent, ids: ids, uid: uid, gid: gid}
	m.uids, m.gids = ids.Maps(uid, gid)
	return m, nil
}

// Mapped makes and handles image trees as root of a user namespace
// mapped like the caller's sandboxes (see the package's doc).
type Mapped struct {
	agent      string
	ids        subid.IDs
	uid, gid   int
	uids, gids []syscall.SysProcIDMap
}

// ID names the mapping: the host ids that the tree's owners are.
func (m *Mapped) ID() string {
	return fmt.Sprintf("mapped uid 0=%d 1=%d+%d gid 0=%d 1=%d+%d", m.uid, m.ids.UID.First, m.ids.UID.Count, m.gid, m.ids.GID.First, m.ids.GID.Count)
}

// start starts the worker for op and args in a new user namespace,
// writes its maps, and lets it run. The caller waits for it.
func (m *Mapped) start(ctx context.Context, cmd *exec.Cmd, op string, args ...string) error {
	bin, err := os.OpenFile(m.agent, os.O_RDONLY|unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the agent binary %s: %w", m.agent, err)
	}
	defer bin.Close()
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer syncW.Close()
	cmd.Path = m.agent
	cmd.Args = append([]string{"airlock-guest", agentproto.AwaitMapsArg, "3", "4", agentproto.ImageWorkerArg, op}, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{syncR, bin}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	syncR.Close()
	if err != nil {
		return fmt.Errorf("start the image worker %s: %w", m.agent, err)
	}
	// The helpers are given the child's pid, which cannot name another
	// process meanwhile: it is not waited for until it has failed.
	err = m.ids.WriteMaps(ctx, cmd.Process.Pid, m.uids, m.gids)
	if err == nil {
		_, err = syncW.Write([]byte{1})
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("map the image worker's ids: %w", err)
	}
	return nil
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// once runs the worker for a single op and returns its result.
func (m *Mapped) once(ctx context.Context, op string, args ...string) (result, error) {
	cmd := exec.CommandContext(ctx, m.agent)
	out := &boundedBuffer{max: maxResult}
	errOut := &boundedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := m.start(ctx, cmd, op, args...); err != nil {
		return result{}, err
	}
	werr := cmd.Wait()
	if cerr := ctx.Err(); cerr != nil {
		return result{}, cerr
	}
	line := bytes.TrimSpace(out.Bytes())
	if len(line) == 0 {
		return result{}, fmt.Errorf("the image worker (%s %s) failed: %v: %s", op, args, werr, bytes.TrimSpace(errOut.Bytes()))
	}
	r, err := decodeResult(line)
	if err != nil {
		return result{}, err
	}
	return r, r.err()
}

// LinkTree is store.LinkTree, as root of the namespace.
func (m *Mapped) LinkTree(ctx context.Context, src, dst string) error {
	_, err := m.once(ctx, opLink, src, dst)
	return err
}

// RemoveTree removes dir: itself when it can (a tree of its own files),
// else as root of the namespace.
func (m *Mapped) RemoveTree(ctx context.Context, dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_, err := m.once(ctx, opRemove, dir)
	return err
}

// Usage is store.Usage: itself when it can read the whole tree, else as
// root of the namespace.
func (m *Mapped) Usage(ctx context.Context, dir string) (int64, int64, error) {
	if size, files, err := store.Usage(dir); err == nil {
		return size, files, nil
	}
	r, err := m.once(ctx, opUsage, dir)
	return r.Size, r.Files, err
}

// Run runs program name as root of the namespace.
func (m *Mapped) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, m.agent)
	out := &boundedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := m.start(ctx, cmd, opExec, append([]string{path}, args...)...); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w", name, err)
	}
	return out.Bytes(), nil
}

// Unpacker starts a worker that applies layers to dir, keeping owners.
func (m *Mapped) Unpacker(ctx context.Context, dir string, opts untar.Options) (store.Unpacker, error) {
	opts.KeepOwners = true
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, m.agent)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errOut := &boundedBuffer{max: 4096}
	cmd.Stderr = errOut
	if err := m.start(ctx, cmd, opApply, dir, string(b)); err != nil {
		return nil, err
	}
	return &unpacker{
		cmd: cmd, in: in, out: bufio.NewReaderSize(outPipe, maxResult), errOut: errOut,
		root: dir, stats: opts.Base, buf: make([]byte, 4+maxFrame),
	}, nil
}

// unpacker is a worker applying layers: each layer's bytes go to it in
// frames, and it answers each layer with its result.
type unpacker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	errOut *boundedBuffer
	root   string
	stats  untar.Stats
	buf    []byte
	// broken is why the worker can apply no more layers.
	broken error
	done   bool
}

func (u *unpacker) Root() string { return u.root }

func (u *unpacker) Stats() untar.Stats {
	st := u.stats
	st.Skipped = append([]string(nil), st.Skipped...)
	return st
}

// Apply sends one layer, read from r, to the worker and returns its
// result. An error reading r stops the worker.
func (u *unpacker) Apply(ctx context.Context, r io.Reader) error {
	if u.broken != nil {
		return u.broken
	}
	for {
		if err := ctx.Err(); err != nil {
			return u.fail(err)
		}
		n, rerr := r.Read(u.buf[4:])
		if n > 0 {
			binary.BigEndian.PutUint32(u.buf, uint32(n))
			if _, err := u.in.Write(u.buf[:4+n]); err != nil {
				return u.fail(u.died(err))
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return u.fail(rerr)
		}
	}
	binary.BigEndian.PutUint32(u.buf, 0)
	if _, err := u.in.Write(u.buf[:4]); err != nil {
		return u.fail(u.died(err))
	}
	line, err := u.out.ReadSlice('\n')
	if err != nil {
		return u.fail(u.died(err))
	}
	res, err := decodeResult(line)
	if err != nil {
		return u.fail(err)
	}
	if res.Stats != nil {
		u.stats = *res.Stats
	}
	return res.err()
}

// died is the error of a worker that stopped answering: how it ended.
func (u *unpacker) died(err error) error {
	u.in.Close()
	werr := u.cmd.Wait()
	u.done = true
	return fmt.Errorf("the image worker stopped (%v): %v: %s", err, werr, bytes.TrimSpace(u.errOut.Bytes()))
}

// fail stops the worker for good and returns err.
func (u *unpacker) fail(err error) error {
	if !u.done {
		_ = u.cmd.Process.Kill()
		u.in.Close()
		_ = u.cmd.Wait()
		u.done = true
	}
	u.broken = err
	return err
}

// Close ends the worker.
func (u *unpacker) Close() error {
	if u.done {
		return nil
	}
	u.done = true
	u.in.Close()
	if err := u.cmd.Wait(); err != nil && u.broken == nil {
		return fmt.Errorf("the image worker: %w: %s", err, bytes.TrimSpace(u.errOut.Bytes()))
	}
	return nil
}
