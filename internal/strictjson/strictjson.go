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
// except that a member no field of v's type takes is an error: an
// *UnknownFieldError when it can be placed, encoding/json's error
// otherwise. Keys match fields as in encoding/json (exactly, else
// without regard to case).
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if isUnknownField(err) {
			if ue := Find(data, reflect.TypeOf(v)); ue != nil {
				return ue
			}
		}
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// isUnknownField reports whether err is encoding/json's refusal of an
// unknown field, which has no type of its own.
func isUnknownField(err error) bool {
	return strings.HasPrefix(err.Error(), "json: unknown field ")
}

// Find returns the first member of data, in document order, that type t
// has no field for, or nil when there is none. Types that decode
// themselves (json.Unmarshaler) are not looked into, except t itself.
func Find(data []byte, t reflect.Type) *UnknownFieldError {
	return find(data, t, "", true)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

func find(data []byte, t reflect.Type, path string, top bool) *UnknownFieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !top && (t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)) {
		return nil
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if data[0] != '{' {
			return nil
		}
		fields := fieldsOf(t)
		return eachMember(data, func(key string, value []byte) *UnknownFieldError {
			f, ok := lookup(fields, key)
			if !ok {
				return unknown(path, key, fields)
			}
			return find(value, f.typ, join(path, key), false)
		})
	case reflect.Map:
		if data[0] != '{' {
			return nil
		}
		return eachMember(data, func(key string, value []byte) *UnknownFieldError {
			return find(value, t.Elem(), join(path, key), false)
		})
	case reflect.Slice, reflect.Array:
		if data[0] != '[' {
			return nil
		}
		var elems []json.RawMessage
		if json.Unmarshal(data, &elems) != nil {
			return nil
		}
		for i, e := range elems {
			if ue := find(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", false); ue != nil {
				return ue
			}
		}
	}
	return nil
}

// eachMember calls fn for the members of the JSON object data, in
// order, until it returns an error.
func eachMember(data []byte, fn func(key string, value []byte) *UnknownFieldError) *UnknownFieldError {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil
		}
		if ue := fn(key, value); ue != nil {
			return ue
		}
	}
	return nil
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
