package agent

import (
	"os"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentproto"
)

// SpawnRequest describes one user command.
type SpawnRequest struct {
	Argv []string
	Env  []string
	Dir  string
	TTY  bool
	// Cred, when set, is who the command runs as; nil: root.
	Cred *Cred
}

// ExitStatus is what the reaper learned about a finished command.
type ExitStatus struct {
	Status  syscall.WaitStatus
	CPUTime time.Duration
	PeakRSS int64
}

// Spawner starts user commands inside the sandbox's confinement.
type Spawner interface {
	// Spawn starts req with stdio as descriptors 0, 1 and 2. The caller
	// keeps ownership of stdio and closes its copies after Spawn returns.
	Spawn(req SpawnRequest, stdio [3]*os.File) (Child, error)
}

// Child is a started command.
type Child interface {
	Pid() int
	// Done is closed when the command has exited and been reaped.
	Done() <-chan struct{}
	// Status is valid after Done is closed.
	Status() ExitStatus
	// Signal sends sig to the command's process group. It does nothing
	// once the command has been reaped.
	Signal(sig syscall.Signal) error
	// KillTree kills the command and every process descended from it or
	// in its session.
	KillTree() error
}

// ContainerSpawner starts the commands of one container of the sandbox.
type ContainerSpawner interface {
	Spawner
	// Stop kills every process of the container; Spawn fails after it.
	Stop()
}

// NewContainer starts the spawner of a container whose root is the
// sandbox's directory root, with binds bound in it. Its confinement is
// the sandbox's own.
type NewContainer func(root string, binds []agentproto.Bind) (ContainerSpawner, error)
