package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// isUnknownField reports whether err is encoding/json's refusal of an
// unknown field, which has no type of its own.
func isUnknownField(err error) bool {
	return strings.HasPrefix(err.Error(), "json: unknown field ")
}

func isTypeError(err error) bool {
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}

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
		var ue *UnknownFieldError
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("Decode(%q) accepted invalid JSON", data)
			}
			return
		}
		switch {
		case werr == nil && err != nil:
			t.Fatalf("Decode(%q): %v; encoding/json accepts it", data, err)
		case werr == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("Decode(%q) = %+v, encoding/json gives %+v", data, got, want)
		case werr != nil && err == nil:
			t.Fatalf("Decode(%q) accepted what encoding/json refuses: %v", data, werr)
		case werr != nil && isUnknownField(werr) && !errors.As(err, &ue):
			t.Fatalf("Decode(%q): %v; want the unknown field of %v named", data, err, werr)
		case errors.As(err, &ue) && !strings.Contains(werr.Error(), "unknown field") && !isTypeError(werr):
			t.Fatalf("Decode(%q) found an unknown field %v where encoding/json says %v", data, ue, werr)
		}
	})
}
