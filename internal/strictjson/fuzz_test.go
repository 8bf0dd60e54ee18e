package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecode checks Decode against encoding/json on any input: it
// accepts what encoding/json with DisallowUnknownFields accepts, with the
// same result; and where that refuses an unknown field, Decode names it.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"name":"x","resources":{"cpus":1}}`,
		`{"resources":{"memory_mbs":512}}`,
		`{"rules":[{"destination":"a","ports":[1]},{"destinaton":"b"}]}`,
		`{"by_name":{"k":{"Ports":[1],"x":2}}}`,
		`{"NAME":"x","Extra":"y","self":{"q":1},"raw":[{"z":1}]}`,
		`{"env":{"a":"b"},"ptr":{"CPUS":1,"cpus":2}}`,
		`{"name":"\u006eame","nam\u0065":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want outer
		err := Decode(data, &got)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		werr := dec.Decode(&want)
		if werr == nil && dec.More() {
			werr = errors.New("data after the value")
		}
		switch {
		case werr == nil && err != nil:
			t.Fatalf("Decode(%q): %v; encoding/json accepts it", data, err)
		case werr == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("Decode(%q) = %+v, encoding/json gives %+v", data, got, want)
		case werr != nil && err == nil:
			t.Fatalf("Decode(%q) accepted what encoding/json refuses: %v", data, werr)
		case werr != nil && isUnknownField(werr):
			var ue *UnknownFieldError
			if !errors.As(err, &ue) {
				t.Fatalf("Decode(%q): %v; want the unknown field of %v named", data, err, werr)
			}
		}
	})
}
