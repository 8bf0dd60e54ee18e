package state

import (
	"encoding/json"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// The configuration shape of the network policy.
		{
			`{"image":"standard","network":{"allowed_hosts":["api.openai.com"],"block_private_ips":true,` +
				`"secrets":{"OPENAI_API_KEY":{"value":"sk-123","hosts":["api.openai.com"]},` +
				`"GH":{"value":{"nested":"x"},"hosts":["github.com"]}}},"env":{"A":"1"}}`,
			`{"image":"standard","network":{"allowed_hosts":["api.openai.com"],"block_private_ips":true,` +
				`"secrets":{"OPENAI_API_KEY":{"value":"[redacted]","hosts":["api.openai.com"]},` +
				`"GH":{"value":{"nested":"[redacted]"},"hosts":["github.com"]}}},"env":{"A":"1"}}`,
		},
		// Secrets as a list, as bare values, or as a map of values.
		{
			`{"secrets":[{"name":"GH_TOKEN","value":"ghp_1"},"bare"]}`,
			`{"secrets":[{"name":"GH_TOKEN","value":"[redacted]"},"[redacted]"]}`,
		},
		{`{"secrets":{"K":"v","N":7,"B":true,"Z":null}}`, `{"secrets":{"K":"[redacted]","N":"[redacted]","B":"[redacted]","Z":null}}`},
		{`{"Secrets":"s"}`, `{"Secrets":"[redacted]"}`},
		{`{"policy_secrets":{"INTERNAL_TOKEN":"t"}}`, `{"policy_secrets":{"INTERNAL_TOKEN":"[redacted]"}}`},
		// Keys that name secrets, in any case, at any depth.
		{
			`{"a":{"Password":"p","db_password":"p","authToken":"t","API_KEY":"k","apikey":1,"ClientSecret":"s","user":"u"}}`,
			`{"a":{"Password":"[redacted]","db_password":"[redacted]","authToken":"[redacted]","API_KEY":"[redacted]","apikey":"[redacted]","ClientSecret":"[redacted]","user":"u"}}`,
		},
		{`{"tokens":["a",{"b":"c"}],"value":"kept"}`, `{"tokens":["[redacted]",{"b":"[redacted]"}],"value":"kept"}`},
		{`[{"token":"t"},{"x":"y"}]`, `[{"token":"[redacted]"},{"x":"y"}]`},
		{`{"token":null,"nums":[1.50,-2e10,0]}`, `{"token":null,"nums":[1.50,-2e10,0]}`},
		// Order, duplicate keys, escapes and HTML characters survive.
		{` { "z" : 1 , "a" : "<&>\u00e9\n", "z": 2 } `, `{"z":1,"a":"<&>é\n","z":2}`},
		{`"just a string"`, `"just a string"`},
		{`{}`, `{}`},
		{`[]`, `[]`},
		// Invalid JSON is redacted as a whole.
		{`{"token":"t"`, `"[redacted]"`},
		{`{"a":1} {"b":2}`, `"[redacted]"`},
		{`{"a":}`, `"[redacted]"`},
		{``, ``},
	} {
		got := Redact(json.RawMessage(tc.in))
		if string(got) != tc.want {
			t.Errorf("Redact(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
		if len(got) > 0 && !json.Valid(got) {
			t.Errorf("Redact(%s) = %s: not valid JSON", tc.in, got)
		}
	}
	if got := Redact(nil); got != nil {
		t.Errorf("Redact(nil) = %q", got)
	}
}
