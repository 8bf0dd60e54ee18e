package jsonblob

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// errNoMember is returned by AppendMarshal when v does not encode the
// member as required.
var errNoMember = errors.New("jsonblob: the value does not encode the member as one empty string")

// AppendMarshal appends to dst what json.Marshal would produce for v with
// the standard base64 encoding of blob as the value of the member named
// key, which v must encode as the empty string "" exactly once (a string
// field without omitempty, left empty).
//
// It marshals v with encoding/json and writes the base64 text into the
// empty string, so that encoding/json never scans it. That is safe
// because of how encoding/json writes: compact, with every quote inside a
// string escaped as \". An occurrence of `,"key":""` or `{"key":""` in
// its output therefore starts outside any string (a quote inside one
// would follow a backslash, not "," or "{"), so it is a member named key
// whose value is "", and there must be exactly one. The key must be
// written by encoding/json as is (no quotes, backslashes, control
// characters or HTML characters). The base64 alphabet needs no escaping
// in a JSON string, so the result is what json.Marshal would give.
func AppendMarshal(dst []byte, v any, key string, blob []byte) ([]byte, error) {
	return AppendMarshalBlobs(dst, v, Blob{Key: key, Data: blob})
}

// Blob is the value of one member for AppendMarshalBlobs.
type Blob struct {
	Key  string
	Data []byte
}

// AppendMarshalBlobs is AppendMarshal for several members, each of which
// v must encode as "" exactly once.
func AppendMarshalBlobs(dst []byte, v any, blobs ...Blob) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	type at struct {
		off  int
		data []byte
	}
	ats := make([]at, len(blobs))
	n := len(b)
	for i, bl := range blobs {
		off, err := Member(b, bl.Key)
		if err != nil {
			return dst, err
		}
		for _, a := range ats[:i] {
			if a.off == off {
				return dst, fmt.Errorf("jsonblob: key %q given twice", bl.Key)
			}
		}
		ats[i] = at{off, bl.Data}
		n += base64.StdEncoding.EncodedLen(len(bl.Data))
	}
	slices.SortFunc(ats, func(a, b at) int { return a.off - b.off })
	dst = slices.Grow(dst, n)
	last := 0
	for _, a := range ats {
		dst = append(dst, b[last:a.off]...)
		dst = AppendEncode(dst, a.data)
		last = a.off
	}
	return append(dst, b[last:]...), nil
}

// Member returns where to write the value of the member named key in b,
// compact JSON from encoding/json (with or without HTML escaping) in
// which that member must occur exactly once, with the empty string as
// its value: the offset of the closing quote of that empty string. The
// key must be written by encoding/json as is (no quotes, backslashes,
// control characters or HTML characters). See AppendMarshal for why an
// occurrence of `,"key":""` or `{"key":""` is always the member.
func Member(b []byte, key string) (int, error) {
	if q, err := json.Marshal(key); key == "" || err != nil || string(q) != `"`+key+`"` {
		return -1, fmt.Errorf("jsonblob: key %q is not written as is by encoding/json", key)
	}
	member := []byte(`"` + key + `":""`)
	at := -1
	for i := 0; ; {
		j := bytes.Index(b[i:], member)
		if j < 0 {
			break
		}
		j += i
		if j > 0 && (b[j-1] == ',' || b[j-1] == '{') {
			if at >= 0 {
				return -1, errNoMember
			}
			at = j + len(member) - 1 // the closing quote
		}
		i = j + 1
	}
	if at < 0 {
		return -1, errNoMember
	}
	return at, nil
}
