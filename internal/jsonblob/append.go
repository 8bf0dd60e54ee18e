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
	if q, err := json.Marshal(key); key == "" || err != nil || string(q) != `"`+key+`"` {
		return dst, fmt.Errorf("jsonblob: key %q is not written as is by encoding/json", key)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
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
				return dst, errNoMember
			}
			at = j + len(member) - 1 // the closing quote
		}
		i = j + 1
	}
	if at < 0 {
		return dst, errNoMember
	}
	dst = slices.Grow(dst, len(b)+base64.StdEncoding.EncodedLen(len(blob)))
	dst = append(dst, b[:at]...)
	dst = AppendEncode(dst, blob)
	return append(dst, b[at:]...), nil
}
