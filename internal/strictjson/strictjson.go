// Package strictjson decodes JSON into Go values refusing unknown fields,
// and says which field was unknown: its path from the top
// ("resources.memory_mbs", "egress[1].port"), the object's fields, and
// the one it was likely meant to be.
//
// encoding/json refuses unknown fields (Decoder.DisallowUnknownFields)
// but names only the key, not where it is, and suggests nothing; the
// path is found here by walking the document along the Go type, only
// once decoding has failed, so that decoding costs what encoding/json
// alone costs.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// UnknownFieldError is an object member that the Go type has no field
// for.
type UnknownFieldError struct {
	// Field is the member's path: object keys joined with ".", array
	// indexes in brackets ("network.egress[0].ports").
	Field string
	// Object is the path of the object holding it, "" for the top one.
	Object string
	// Known lists the object's fields.
	Known []string
	// Suggestion is the path of the field Field was likely meant to
	// be, or "".
	Suggestion string
}

func (e *UnknownFieldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown field %s", quote(e.Field))
	if e.Suggestion != "" {
		fmt.Fprintf(&b, " (did you mean %s?)", quote(e.Suggestion))
	}
	what := "the object"
	if e.Object != "" {
		what = e.Object
	}
	if len(e.Known) > 0 {
		fmt.Fprintf(&b, ": %s takes %s", what, strings.Join(e.Known, ", "))
	} else {
		fmt.Fprintf(&b, ": %s takes none", what)
	}
	return b.String()
}

// In returns e as found in the member prefix of an enclosing object.
func (e *UnknownFieldError) In(prefix string) *UnknownFieldError {
	c := *e
	c.Field = join(prefix, e.Field)
	c.Object = join(prefix, e.Object)
	if e.Suggestion != "" {
		c.Suggestion = join(prefix, e.Suggestion)
	}
	return &c
}

// Decode decodes the JSON value data into v, as json.Unmarshal does,
// except that a member no field of v's type takes is an error, an
// *UnknownFieldError. Keys match fields as in encoding/json (exactly,
// else without regard to case). On an error, v may have been partly
// filled.
//
// The check is a scan of data after json.Unmarshal has accepted it,
// which copies nothing: data may be a line of many megabytes.
func Decode(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	var te *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &te) {
		return err
	}
	// data is valid JSON: encoding/json checks it before decoding.
	if ue := Find(data, reflect.TypeOf(v)); ue != nil {
		return ue
	}
	return err
}

// Find returns the first member of the JSON value data, in document
// order, that type t has no field for, or nil when there is none (or
// data is not valid JSON). Types that decode themselves
// (json.Unmarshaler) are not looked into, except t itself.
func Find(data []byte, t reflect.Type) *UnknownFieldError {
	w := walker{data: data}
	return w.value(t, "", true)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// walker goes over a JSON document along a Go type. It reads data in
// place and stops, finding nothing, at anything that is not valid JSON.
type walker struct {
	data []byte
	i    int
	bad  bool
}

// value walks the value at w.i, of type t, and moves past it.
func (w *walker) value(t reflect.Type, path string, top bool) *UnknownFieldError {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	w.space()
	if w.i >= len(w.data) {
		w.bad = true
		return nil
	}
	if t == nil || !top && (t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)) {
		w.skip()
		return nil
	}
	switch c := w.data[w.i]; {
	case c == '{' && t.Kind() == reflect.Struct:
		fields := fieldsOf(t)
		return w.object(func(key string) (reflect.Type, string, *UnknownFieldError) {
			f, ok := lookup(fields, key)
			if !ok {
				return nil, "", unknown(path, key, fields)
			}
			return f.typ, join(path, key), nil
		})
	case c == '{' && t.Kind() == reflect.Map:
		return w.object(func(key string) (reflect.Type, string, *UnknownFieldError) {
			return t.Elem(), join(path, key), nil
		})
	case c == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		w.i++
		for n := 0; ; n++ {
			w.space()
			if w.i < len(w.data) && w.data[w.i] == ']' {
				w.i++
				return nil
			}
			if n > 0 {
				if !w.expect(',') {
					return nil
				}
			}
			if ue := w.value(t.Elem(), path+"["+strconv.Itoa(n)+"]", false); ue != nil || w.bad {
				return ue
			}
		}
	}
	w.skip()
	return nil
}

// object walks the members of the object at w.i; member gives the type
// and path of each key's value, or the error of an unknown key.
func (w *walker) object(member func(key string) (reflect.Type, string, *UnknownFieldError)) *UnknownFieldError {
	w.i++ // '{'
	for n := 0; ; n++ {
		w.space()
		if w.i < len(w.data) && w.data[w.i] == '}' {
			w.i++
			return nil
		}
		if n > 0 && !w.expect(',') {
			return nil
		}
		w.space()
		key, ok := w.key()
		if !ok || !w.expect(':') {
			w.bad = true
			return nil
		}
		t, path, ue := member(key)
		if ue != nil {
			return ue
		}
		if ue := w.value(t, path, false); ue != nil || w.bad {
			return ue
		}
	}
}

func (w *walker) space() {
	for w.i < len(w.data) {
		switch w.data[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

func (w *walker) expect(c byte) bool {
	w.space()
	if w.i < len(w.data) && w.data[w.i] == c {
		w.i++
		return true
	}
	w.bad = true
	return false
}

// key reads the string at w.i, unescaped.
func (w *walker) key() (string, bool) {
	start := w.i
	if !w.str() {
		return "", false
	}
	raw := w.data[start:w.i]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// str moves past the string at w.i.
func (w *walker) str() bool {
	if w.i >= len(w.data) || w.data[w.i] != '"' {
		w.bad = true
		return false
	}
	i := w.i + 1
	for {
		j := bytes.IndexByte(w.data[i:], '"')
		if j < 0 {
			w.bad = true
			return false
		}
		i += j
		// Escaped when an odd number of backslashes precede it.
		k := i
		for k > w.i+1 && w.data[k-1] == '\\' {
			k--
		}
		i++
		if (i-1-k)%2 == 0 {
			w.i = i
			return true
		}
	}
}

// skip moves past the value at w.i, whatever it is.
func (w *walker) skip() {
	w.space()
	if w.i >= len(w.data) {
		w.bad = true
		return
	}
	switch w.data[w.i] {
	case '"':
		w.str()
	case '{', '[':
		depth := 0
		for w.i < len(w.data) {
			switch w.data[w.i] {
			case '"':
				if !w.str() {
					return
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					w.i++
					return
				}
			}
			w.i++
		}
		w.bad = true
	default: // a number, true, false or null
		for w.i < len(w.data) {
			switch w.data[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			w.i++
		}
	}
}

type field struct {
	name string
	typ  reflect.Type
}

// fieldsOf lists the JSON members struct type t takes, as encoding/json
// names them, including those of embedded structs.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for sf := range t.Fields() {
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				out = append(out, fieldsOf(et)...)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, field{name: name, typ: ft})
	}
	return out
}

// lookup finds the field key names: exactly, else without regard to
// case, as encoding/json matches them.
func lookup(fields []field, key string) (field, bool) {
	for _, f := range fields {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return field{}, false
}

func unknown(path, key string, fields []field) *UnknownFieldError {
	ue := &UnknownFieldError{Field: join(path, key), Object: path}
	for _, f := range fields {
		ue.Known = append(ue.Known, f.name)
	}
	if s := closest(key, ue.Known); s != "" {
		ue.Suggestion = join(path, s)
	}
	return ue
}

// closest returns the one name within a few edits of key (a letter
// missing, added, changed or two swapped, more for longer keys), or ""
// when none is, or several are as close.
func closest(key string, names []string) string {
	key = strings.ToLower(key)
	limit := max(1, min(3, utf8.RuneCountInString(key)/4))
	best, bestDist, tie := "", limit+1, false
	for _, n := range names {
		d := distance(key, strings.ToLower(n))
		switch {
		case d < bestDist:
			best, bestDist, tie = n, d, false
		case d == bestDist:
			tie = true
		}
	}
	if tie || bestDist > limit {
		return ""
	}
	return best
}

// distance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and transpositions of
// adjacent runes that turn one into the other.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows of the dynamic programming table.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

func join(path, key string) string {
	switch {
	case path == "":
		return key
	case key == "":
		return path
	case strings.HasPrefix(key, "["):
		return path + key
	}
	return path + "." + key
}

// quote quotes a path for a message, shortened when long: it may come
// from a hostile client.
func quote(s string) string {
	const max = 120
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}
