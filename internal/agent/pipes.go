package agent

import (
	"os"
	"sync/atomic"
)

// pipePool keeps a few output pipes made ahead of the commands that will
// use them: creating two pipes is a good part of the agent's own work on
// an exec. The pool is refilled after a command has ended, when the agent
// has nothing else to do, rather than while a command is being started.
type pipePool struct {
	ready     chan pipe
	refilling atomic.Bool
}

type pipe struct{ r, w *os.File }

// pipesAhead is how many pipes wait in the pool: the two of one command
// and the two of the next.
const pipesAhead = 4

func newPipePool() *pipePool {
	p := &pipePool{ready: make(chan pipe, pipesAhead)}
	go p.refill()
	return p
}

// get returns a pipe from the pool, or a new one when the pool is empty.
func (p *pipePool) get() (r, w *os.File, err error) {
	select {
	case pp := <-p.ready:
		return pp.r, pp.w, nil
	default:
		return outputPipe()
	}
}

// refill tops the pool up; it returns at once if another refill runs.
func (p *pipePool) refill() {
	if len(p.ready) == pipesAhead || !p.refilling.CompareAndSwap(false, true) {
		return
	}
	defer p.refilling.Store(false)
	for len(p.ready) < pipesAhead {
		r, w, err := outputPipe()
		if err != nil {
			return // out of descriptors: get reports it on the next exec
		}
		select {
		case p.ready <- pipe{r, w}:
		default:
			r.Close()
			w.Close()
			return
		}
	}
}
