package mounts

import (
	"path"
	"strings"
)

// Flags holds one yes-or-no property of a sandbox's mounts (whether a
// mount is a direct one; whether its provider reports every change made
// other than through the sandbox's mount), by mount target. The property
// of a path is that of the innermost target holding it; a path under no
// target has it not.
type Flags map[string]bool

// At reports the property of p (clean and absolute). It is asked on
// every file operation of a mount: it allocates nothing.
func (f Flags) At(p string) bool {
	if len(f) == 0 {
		return false
	}
	for {
		if v, ok := f[p]; ok {
			return v
		}
		i := strings.LastIndexByte(p, '/')
		switch {
		case i < 0 || p == "/":
			return false
		case i == 0:
			p = "/"
		default:
			p = p[:i]
		}
	}
}

// Within is f seen from beneath dir (a mount target): the targets inside
// dir, as paths from dir, and dir itself as "/" when f has it there.
func (f Flags) Within(dir string) Flags {
	out := Flags{}
	if f.At(dir) {
		out["/"] = true
	}
	for t, v := range f {
		if Within(t, dir) {
			rel := t
			if dir != "/" {
				rel = "/" + t[len(dir):]
			}
			out[path.Clean(rel)] = v
		}
	}
	return out
}

// Any reports whether some target has the property.
func (f Flags) Any() bool {
	for _, v := range f {
		if v {
			return true
		}
	}
	return false
}
