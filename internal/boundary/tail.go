package boundary

import (
	"strings"
	"sync"
)

// Tail keeps the last bytes written to it: what a backend's processes
// (an agent, a VMM, runsc) printed, for the error that says how they
// ended.
type Tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTail keeps the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String is what was kept.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Last is the last n lines of what was kept.
func (t *Tail) Last(n int) string {
	lines := strings.Split(strings.TrimRight(t.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
