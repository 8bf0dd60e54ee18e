package strictjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
}

type rule struct {
	Destination string   `json:"destination"`
	Ports       []uint16 `json:"ports"`
}

type Embedded struct {
	Extra string `json:"extra"`
}

type self struct{ X int }

func (s *self) UnmarshalJSON(b []byte) error { return nil }

type outer struct {
	Embedded
	Name      string            `json:"name"`
	Resources inner             `json:"resources"`
	Ptr       *inner            `json:"ptr"`
	Rules     []rule            `json:"rules"`
	ByName    map[string]rule   `json:"by_name"`
	Env       map[string]string `json:"env"`
	Raw       json.RawMessage   `json:"raw"`
	When      time.Time         `json:"when"`
	Self      self              `json:"self"`
	Skipped   string            `json:"-"`
	NoTag     int
	//lint:ignore U1000 an unexported field, which encoding/json never sets
	hidden int
}

func TestDecode(t *testing.T) {
	cases := []struct {
		in         string
		field, sug string
	}{
		{`{"nmae":"x"}`, "nmae", "name"},
		{`{"resources":{"memory_mbs":512}}`, "resources.memory_mbs", "resources.memory_mb"},
		{`{"resources":{"cpu":1}}`, "resources.cpu", "resources.cpus"},
		{`{"ptr":{"memroy_mb":1}}`, "ptr.memroy_mb", "ptr.memory_mb"},
		{`{"rules":[{"destination":"a","ports":[1]},{"destination":"b","port":[2]}]}`, "rules[1].port", "rules[1].ports"},
		{`{"by_name":{"k":{"destinaton":"a"}}}`, "by_name.k.destinaton", "by_name.k.destination"},
		{`{"extr":"x"}`, "extr", "extra"},
		{`{"name":"x","completely_else":1}`, "completely_else", ""},
		{`{"Skipped":"x"}`, "Skipped", ""},
		{`{"-":"x"}`, "-", ""},
		{`{"hidden":1}`, "hidden", ""},
		// The first in document order.
		{`{"zz":1,"aa":2}`, "zz", ""},
	}
	for _, c := range cases {
		var v outer
		err := Decode([]byte(c.in), &v)
		var ue *UnknownFieldError
		if !errors.As(err, &ue) {
			t.Errorf("%s: %v, want an unknown field", c.in, err)
			continue
		}
		if ue.Field != c.field || ue.Suggestion != c.sug {
			t.Errorf("%s: field %q, suggestion %q; want %q, %q", c.in, ue.Field, ue.Suggestion, c.field, c.sug)
		}
		if !strings.Contains(err.Error(), `"`+c.field+`"`) || len(ue.Known) == 0 {
			t.Errorf("%s: %v", c.in, err)
		}
	}

	// What encoding/json accepts, Decode accepts alike.
	for _, in := range []string{
		`{}`, `null`, `{"name":"x","NAME":"y","Name":"z"}`, `{"resources":{"CPUS":2}}`,
		`{"env":{"anything":"x"}}`, `{"raw":{"whatever":{"deep":1}}}`, `{"self":{"anything":1}}`,
		`{"when":"2024-01-01T00:00:00Z"}`, `{"NoTag":1,"notag":2}`, `{"ptr":null,"rules":null}`,
		`{"by_name":{"a":{"destination":"x","ports":[1,2]}}}`,
	} {
		var got, want outer
		if err := Decode([]byte(in), &got); err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, encoding/json gives %+v", in, got, want)
		}
	}

	// Type errors stay encoding/json's, naming the field.
	var v outer
	var te *json.UnmarshalTypeError
	if err := Decode([]byte(`{"resources":{"memory_mb":"lots"}}`), &v); !errors.As(err, &te) || te.Field != "resources.memory_mb" {
		t.Errorf("type error: %v", err)
	}
	if err := Decode([]byte(`{} {}`), &v); err == nil {
		t.Error("data after the value was accepted")
	}
	if err := Decode([]byte(`{"name":`), &v); err == nil {
		t.Error("truncated JSON was accepted")
	}
}

func TestIn(t *testing.T) {
	var v inner
	err := Decode([]byte(`{"memory":1}`), &v)
	var ue *UnknownFieldError
	if !errors.As(err, &ue) {
		t.Fatal(err)
	}
	got := ue.In("network").Error()
	if want := `unknown field "network.memory": network takes cpus, memory_mb`; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

func TestClosest(t *testing.T) {
	names := []string{"command", "argv", "working_dir", "env", "timeout_seconds", "stdin", "open_stdin", "tty", "rows", "cols", "mode"}
	for key, want := range map[string]string{
		"comand": "command", "commnad": "command", "Command": "command", "argvs": "argv",
		"working_dri": "working_dir", "timeout_second": "timeout_seconds", "timeout_secs": "timeout_seconds", "t": "",
		"tt": "tty", "row": "rows", "xyz": "", "stdinn": "stdin", "open_stdn": "open_stdin",
		// As close to two: no suggestion.
		"col": "cols", "mod": "mode", "rols": "",
	} {
		if got := closest(key, names); got != want {
			t.Errorf("closest(%q) = %q, want %q", key, got, want)
		}
	}
}
