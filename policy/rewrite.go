package policy

import (
	"bytes"
	"fmt"
	"io"
)

// A rewrite rule replaces from by to, or, when leak is set, makes the
// data it appears in a leak of that secret.
type rule struct {
	from []byte
	to   []byte
	leak string
	// form is how from writes a secret's value (valueForm.name), or ""
	// when from is a placeholder.
	form string
	// cleartext marks a leak of a secret scoped to the host, whose
	// request goes in plain HTTP and the secret only over TLS.
	cleartext bool
}

// engine replaces the occurrences of its rules' patterns, scanning left
// to right and taking at each position the longest pattern that matches
// there (leftmost-longest); replaced text is not scanned again.
type engine struct {
	rules []rule
	// maxLen is the length of the longest pattern.
	maxLen int
	// anchor is the longest prefix common to all patterns; data without
	// it has nothing to replace.
	anchor []byte
	// first marks the bytes that begin some pattern.
	first [256]bool
	// host is the destination, for leak errors.
	host string
}

func newEngine(rules []rule, host string) *engine {
	e := &engine{rules: rules, host: host}
	for i, r := range rules {
		if len(r.from) == 0 {
			panic("policy: empty rewrite pattern")
		}
		e.maxLen = max(e.maxLen, len(r.from))
		e.first[r.from[0]] = true
		if i == 0 {
			e.anchor = r.from
			continue
		}
		n := 0
		for n < len(e.anchor) && n < len(r.from) && e.anchor[n] == r.from[n] {
			n++
		}
		e.anchor = e.anchor[:n]
	}
	return e
}

// empty reports whether the engine can change nothing.
func (e *engine) empty() bool { return len(e.rules) == 0 }

// quiet reports whether b certainly holds no pattern.
func (e *engine) quiet(b []byte) bool {
	if len(e.rules) == 0 {
		return true
	}
	if len(e.anchor) > 0 {
		return !bytes.Contains(b, e.anchor)
	}
	return false
}

// holdStart returns the first position j at which buf[j:] is a proper
// prefix of a pattern: the place where more data could still make or
// lengthen a match. It is len(buf) when there is none. Everything before
// it can be decided now.
func (e *engine) holdStart(buf []byte) int {
	for j := max(0, len(buf)-e.maxLen+1); j < len(buf); j++ {
		if !e.first[buf[j]] {
			continue
		}
		tail := buf[j:]
		for _, r := range e.rules {
			if len(r.from) > len(tail) && bytes.HasPrefix(r.from, tail) {
				return j
			}
		}
	}
	return len(buf)
}

func (e *engine) leakError(r *rule) error {
	what := "the placeholder of secret " + r.leak
	if r.form != "" {
		what = fmt.Sprintf("the value of secret %s (%s)", r.leak, r.form)
	}
	if r.cleartext {
		return &BlockError{Reason: ReasonSecretPlaintext, Detail: fmt.Sprintf("%s is in a plain-HTTP request to %s, where it would cross the network in clear: the secret is sent only over TLS; use https://, or set allow_plaintext on the secret", what, e.host)}
	}
	return &BlockError{Reason: ReasonSecretLeak, Detail: fmt.Sprintf("%s is in a request to %s, which the secret is not scoped to", what, e.host)}
}

// run rewrites buf, appending to dst. Unless eof is set, it stops where
// more data could change the result, and consumed says how much of buf
// was used; the rest must be given again with more data after it. next
// is scratch space with one element per rule. A leak stops the scan with
// an error.
func (e *engine) run(dst, buf []byte, eof bool, next []int) (out []byte, consumed int, err error) {
	limit := len(buf)
	if !eof {
		limit = e.holdStart(buf)
	}
	for k := range next {
		next[k] = -2 // not searched yet
	}
	i := 0
	for i < limit {
		p, r := -1, -1
		for k := range e.rules {
			if next[k] == -1 {
				continue // no occurrence left
			}
			if next[k] < i {
				idx := bytes.Index(buf[i:], e.rules[k].from)
				if idx < 0 {
					next[k] = -1
					continue
				}
				next[k] = i + idx
			}
			if p < 0 || next[k] < p || next[k] == p && len(e.rules[k].from) > len(e.rules[r].from) {
				p, r = next[k], k
			}
		}
		if p < 0 || p >= limit {
			break
		}
		dst = append(dst, buf[i:p]...)
		if e.rules[r].leak != "" {
			return dst, p, e.leakError(&e.rules[r])
		}
		dst = append(dst, e.rules[r].to...)
		i = p + len(e.rules[r].from)
	}
	if i < limit {
		dst = append(dst, buf[i:limit]...)
		i = limit
	}
	return dst, i, nil
}

// bytes rewrites a whole buffer. It returns b itself when nothing
// changes.
func (e *engine) bytes(b []byte) ([]byte, error) {
	if e.quiet(b) {
		return b, nil
	}
	next := make([]int, len(e.rules))
	out, _, err := e.run(make([]byte, 0, len(b)), b, true, next)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(out, b) {
		return b, nil
	}
	return out, nil
}

// readChunk is how much a rewriting reader asks of its source at a time.
const readChunk = 32 << 10

// rewriter rewrites a stream. It holds back at most maxLen-1 bytes that
// could be the start of a pattern split across reads.
type rewriter struct {
	e     *engine
	src   io.Reader
	limit int64 // bound on input bytes; negative for none
	read  int64
	in    []byte // input not yet decided
	out   []byte // output not yet returned
	off   int    // how much of out was returned
	next  []int
	eof   bool
	err   error // sticky
}

func newRewriter(e *engine, src io.Reader, limit int64) *rewriter {
	return &rewriter{
		e:     e,
		src:   src,
		limit: limit,
		in:    make([]byte, 0, readChunk+e.maxLen),
		next:  make([]int, len(e.rules)),
	}
}

func (r *rewriter) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.off == len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		if r.eof {
			out, _, err := r.e.run(r.out, r.in, true, r.next)
			r.in = r.in[:0]
			if err != nil {
				r.fail(err)
				return 0, err
			}
			r.out = out
			r.err = io.EOF
			continue
		}
		if err := r.fill(); err != nil {
			r.fail(err)
			return 0, err
		}
		if r.eof {
			continue
		}
		out, used, err := r.e.run(r.out, r.in, false, r.next)
		if err != nil {
			r.fail(err)
			return 0, err
		}
		r.out = out
		n := copy(r.in, r.in[used:])
		r.in = r.in[:n]
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// fill reads once from the source.
func (r *rewriter) fill() error {
	if cap(r.in)-len(r.in) < readChunk {
		grown := make([]byte, len(r.in), len(r.in)+readChunk+r.e.maxLen)
		copy(grown, r.in)
		r.in = grown
	}
	n, err := r.src.Read(r.in[len(r.in):cap(r.in)])
	r.in = r.in[:len(r.in)+n]
	r.read += int64(n)
	if r.limit >= 0 && r.read > r.limit {
		return &BlockError{Reason: ReasonSecretUnrewritable, Detail: fmt.Sprintf("the data is longer than %d bytes, the most that is scanned for secret placeholders", r.limit)}
	}
	if err == io.EOF {
		r.eof = true
		return nil
	}
	return err
}

// fail drops everything held and makes err sticky.
func (r *rewriter) fail(err error) {
	r.err = err
	r.in, r.out, r.off = nil, nil, 0
}
