// Package agent is the airlock guest agent. The same code runs as PID 1
// inside every isolation boundary: it prepares the sandbox, then serves exec
// and file requests from the host over one multiplexed byte stream.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/hashicorp/yamux"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// Prepared is a sandbox set up from its boot configuration: the spawner
// that starts user commands, notes on confinement that could not be
// applied, and the programmable mounts waiting for the host.
type Prepared struct {
	Spawner Spawner
	Notes   []string
	// NewContainer starts a container's spawner (OpContainer); nil:
	// this sandbox has no containers.
	NewContainer NewContainer
	vfs          *vfsMounts
	// usage reads what the user commands use, where the agent can (nil:
	// the host measures it).
	usage func() (agentproto.Usage, error)
	// limits reads the user commands' limit events so far, where the
	// agent counts them (nil: the host does); cheaper than usage, it is
	// read around every command.
	limits func() (agentproto.LimitEvents, error)
}

// Preparer sets the sandbox up from the boot configuration.
type Preparer func(ctx context.Context, boot *agentproto.Boot) (Prepared, error)

// Serve runs the boot handshake on conn and then serves requests until the
// host goes away.
func Serve(ctx context.Context, conn io.ReadWriteCloser, prepare Preparer, log *slog.Logger) error {
	fc := agentproto.NewConn(conn)
	var boot agentproto.Boot
	if err := fc.Read(&boot); err != nil {
		return fmt.Errorf("read boot config: %w", err)
	}
	if boot.Version != agentproto.Version {
		err := fmt.Errorf("host speaks protocol %d, agent speaks %d: use matching airlock and airlock-guest binaries", boot.Version, agentproto.Version)
		_ = fc.Write(agentproto.Ready{Version: agentproto.Version, Err: agentproto.Errorf(agentproto.CodeInvalid, err.Error())})
		return err
	}
	prep, err := prepare(ctx, &boot)
	sp, notes := prep.Spawner, prep.Notes
	if err != nil {
		_ = fc.Write(agentproto.Ready{Version: agentproto.Version, Err: agentproto.ToError(err)})
		return fmt.Errorf("prepare sandbox: %w", err)
	}
	// Read and written: every command's stdin when the host sends none,
	// and stdout and stderr when it wants no output.
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		err = fmt.Errorf("open %s in the sandbox: %w", os.DevNull, err)
		_ = fc.Write(agentproto.Ready{Version: agentproto.Version, Err: agentproto.ToError(err)})
		return err
	}
	defer devnull.Close()
	// File operations resolve every path from the sandbox's root, which is
	// the agent's own once the sandbox is prepared.
	fsys, err := openSandboxFS("/")
	if err != nil {
		_ = fc.Write(agentproto.Ready{Version: agentproto.Version, Err: agentproto.ToError(err)})
		return err
	}
	defer fsys.Close()
	if err := fc.Write(agentproto.Ready{Version: agentproto.Version, Notes: notes}); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	sess, err := yamux.Server(agentproto.CoalesceWrites(conn), agentproto.AgentMuxConfig())
	if err != nil {
		return fmt.Errorf("start stream multiplexer: %w", err)
	}
	defer sess.Close()
	s := &server{spawner: sp, env: boot.Env, log: log, devnull: devnull, pipes: newPipePool(), fs: fsys, vfs: prep.vfs, usage: prep.usage, limits: prep.limits,
		newContainer: prep.NewContainer, containers: map[string]ContainerSpawner{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		st, err := sess.Accept()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept stream: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !s.handle(ctx, st) {
				st.Close()
			}
		}()
	}
}

type server struct {
	spawner Spawner
	env     []string
	log     *slog.Logger
	// devnull is the stdin of commands that get none from the host.
	devnull *os.File
	pipes   *pipePool
	// fs carries out file operations inside the sandbox's root.
	fs *sandboxFS
	// vfs holds the programmable mounts until the host serves them.
	vfs    *vfsMounts
	usage  func() (agentproto.Usage, error)
	limits func() (agentproto.LimitEvents, error)

	newContainer NewContainer
	cmu          sync.Mutex
	containers   map[string]ContainerSpawner
}

// handle serves one stream's request, and reports whether the stream
// lives on (a programmable mount's, which its server now owns).
func (s *server) handle(ctx context.Context, st net.Conn) (kept bool) {
	c := agentproto.NewConn(st)
	var req agentproto.Request
	if err := c.Read(&req); err != nil {
		s.log.Debug("read request", "err", err)
		return false
	}
	var err error
	switch req.Op {
	case agentproto.OpPing:
		err = c.Write(agentproto.Msg{K: agentproto.KEnd})
	case agentproto.OpExec:
		err = s.exec(ctx, c, st, req.Exec)
	case agentproto.OpWriteFile, agentproto.OpReadFile, agentproto.OpListFiles,
		agentproto.OpStat, agentproto.OpMkdir, agentproto.OpRemove, agentproto.OpSymlink, agentproto.OpSetAttr:
		err = s.file(c, &req)
	case agentproto.OpVFS:
		kept, err = s.serveVFS(c, st, req.Path)
	case agentproto.OpUsage:
		err = s.serveUsage(c)
	case agentproto.OpContainer:
		err = s.container(c, req.Container)
	case agentproto.OpProcesses:
		err = s.processes(ctx, c)
	default:
		err = c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("unknown operation %q", req.Op))})
	}
	if err != nil {
		s.log.Debug("request failed", "op", req.Op, "err", err)
	}
	return kept
}

// serveUsage answers what the user commands use, where this agent
// measures it.
func (s *server) serveUsage(c *agentproto.Conn) error {
	if s.usage == nil {
		return c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.Errorf(agentproto.CodeUnsupported, "this sandbox's usage is measured by its host")})
	}
	u, err := s.usage()
	if err != nil {
		return c.Write(agentproto.Msg{K: agentproto.KErr, Err: agentproto.ToError(err)})
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd, Usage: &u})
}

// processLister lists the processes of the sandbox's commands: the
// spawner does, from the /proc of their PID namespace.
type processLister interface {
	Processes(ctx context.Context) ([]agentproto.Process, int, error)
}

// processes answers OpProcesses.
func (s *server) processes(ctx context.Context, c *agentproto.Conn) error {
	pl, ok := s.spawner.(processLister)
	if !ok {
		return replyErr(c, agentproto.Errorf(agentproto.CodeUnsupported, "this sandbox's spawner cannot list its processes"))
	}
	procs, more, err := pl.Processes(ctx)
	if err != nil {
		return replyErr(c, agentproto.ToError(err))
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd, Procs: procs, ProcsMore: more})
}

// maxContainers bounds the containers of one sandbox.
const maxContainers = 256

// container adds or removes a container.
func (s *server) container(c *agentproto.Conn, r *agentproto.ContainerRequest) error {
	if err := validContainer(r); err != nil {
		return replyErr(c, agentproto.Errorf(agentproto.CodeInvalid, err.Error()))
	}
	if s.newContainer == nil {
		return replyErr(c, agentproto.Errorf(agentproto.CodeUnsupported, "this sandbox cannot have containers"))
	}
	s.cmu.Lock()
	old, exists := s.containers[r.Name]
	switch {
	case r.Remove && (!exists || old == nil):
		s.cmu.Unlock()
		return replyErr(c, agentproto.Errorf(agentproto.CodeNotFound, fmt.Sprintf("no container %s (or it is still starting)", r.Name)))
	case r.Remove:
		delete(s.containers, r.Name)
		s.cmu.Unlock()
		old.Stop()
		return c.Write(agentproto.Msg{K: agentproto.KEnd})
	case exists:
		s.cmu.Unlock()
		return replyErr(c, agentproto.Errorf(agentproto.CodeExists, fmt.Sprintf("container %s exists", r.Name)))
	case len(s.containers) >= maxContainers:
		s.cmu.Unlock()
		return replyErr(c, agentproto.Errorf(agentproto.CodeInvalid, fmt.Sprintf("a sandbox has at most %d containers", maxContainers)))
	}
	// The name is taken (nil: starting) while its spawner starts, which
	// takes a while; commands in other containers do not wait for it.
	s.containers[r.Name] = nil
	s.cmu.Unlock()
	sp, err := s.newContainer(r.Root, r.Binds)
	s.cmu.Lock()
	if err != nil {
		delete(s.containers, r.Name)
	} else {
		s.containers[r.Name] = sp
	}
	s.cmu.Unlock()
	if err != nil {
		return replyErr(c, agentproto.Errorf(agentproto.CodeStart, fmt.Sprintf("start container %s: %v", r.Name, err)))
	}
	return c.Write(agentproto.Msg{K: agentproto.KEnd})
}

// spawnerFor is the spawner of container name, or the sandbox's own.
func (s *server) spawnerFor(name string) (Spawner, error) {
	if name == "" {
		return s.spawner, nil
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	sp := s.containers[name]
	if sp == nil {
		return nil, agentproto.Errorf(agentproto.CodeNotFound, fmt.Sprintf("no container %s (or it is still starting)", name))
	}
	return sp, nil
}
