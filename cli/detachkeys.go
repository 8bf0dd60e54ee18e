package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// defaultDetachKeys is docker's: Ctrl-P then Ctrl-Q.
const defaultDetachKeys = "ctrl-p,ctrl-q"

// parseDetachKeys reads a --detach-keys value as docker does: a comma-
// separated sequence of single characters and ctrl-<key>, where key is a
// letter or one of @ [ \ ] ^ _.
func parseDetachKeys(s string) ([]byte, error) {
	var keys []byte
	for part := range strings.SplitSeq(s, ",") {
		switch {
		case len(part) == 1:
			keys = append(keys, part[0])
		case len(part) == 6 && strings.HasPrefix(strings.ToLower(part), "ctrl-"):
			c := part[5]
			switch {
			case 'a' <= c && c <= 'z':
				keys = append(keys, c-'a'+1)
			case 'A' <= c && c <= 'Z':
				keys = append(keys, c-'A'+1)
			case c == '@' || c == '[' || c == '\\' || c == ']' || c == '^' || c == '_':
				keys = append(keys, c-'@')
			default:
				return nil, fmt.Errorf("--detach-keys %q: ctrl- takes a letter or one of @ [ \\ ] ^ _, not %q", s, c)
			}
		default:
			return nil, fmt.Errorf("--detach-keys %q: give keys separated by commas, each a single character or ctrl-<key> (default %s)", s, defaultDetachKeys)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--detach-keys is empty: give keys such as %s", defaultDetachKeys)
	}
	return keys, nil
}

// errDetachKeys ends an escapeReader: the user typed the detach keys.
var errDetachKeys = errors.New("detach keys typed")

// escapeReader passes input on until the detach keys come in a row; it
// then fails with errDetachKeys. Keys that start the sequence are held
// back until the sequence is complete or broken; broken, they are passed
// on.
type escapeReader struct {
	r    io.Reader
	keys []byte
	held int    // how many of keys have come in a row
	out  []byte // what is ready to be read
	// typed: the keys came; out holds what came before them.
	typed bool
	buf   [4096]byte
}

func (e *escapeReader) Read(p []byte) (int, error) {
	for len(e.out) == 0 {
		if e.typed {
			return 0, errDetachKeys
		}
		n, err := e.r.Read(e.buf[:])
	scan:
		for _, c := range e.buf[:n] {
			switch {
			case c == e.keys[e.held]:
				e.held++
				if e.held == len(e.keys) {
					// What follows the keys is not passed on.
					e.typed = true
					break scan
				}
			case e.held > 0:
				e.out = append(e.out, e.keys[:e.held]...)
				e.held = 0
				if c == e.keys[0] {
					e.held = 1
				} else {
					e.out = append(e.out, c)
				}
			default:
				e.out = append(e.out, c)
			}
		}
		if err != nil && !e.typed {
			if len(e.out) == 0 {
				if e.held > 0 {
					e.out = append(e.out, e.keys[:e.held]...)
					e.held = 0
					continue
				}
				return 0, err
			}
			break
		}
	}
	n := copy(p, e.out)
	e.out = e.out[n:]
	if len(e.out) == 0 {
		e.out = nil
	}
	return n, nil
}
