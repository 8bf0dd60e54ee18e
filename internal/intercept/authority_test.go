package intercept

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseAuthority(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port uint16
		ok   bool
	}{
		{"api.example.com", "api.example.com", 0, true},
		{"API.Example.COM.", "api.example.com", 0, true},
		{"api.example.com:8443", "api.example.com", 8443, true},
		{"api.example.com:0443", "api.example.com", 443, true},
		{"localhost", "localhost", 0, true}, // a name; the policy decides
		{"", "", 0, false},
		{"api.example.com:", "", 0, false},
		{"api.example.com:0", "", 0, false},
		{"api.example.com:65536", "", 0, false},
		{"api.example.com:+80", "", 0, false},
		{"api.example.com:80:80", "", 0, false},
		{"user@api.example.com", "", 0, false},
		{"10.0.0.1", "", 0, false},
		{"10.0.0.1:80", "", 0, false},
		{"[::1]:443", "", 0, false},
		{"::1", "", 0, false},
		{"a..b", "", 0, false},
		{".example.com", "", 0, false},
		{"exa mple.com", "", 0, false},
		{"ex%41mple.com", "", 0, false},
		{"example.com/path", "", 0, false},
		{"ex\u00e4mple.com", "", 0, false},
	} {
		a, err := parseAuthority(tc.in)
		if (err == nil) != tc.ok || a.host != tc.host || a.port != tc.port {
			t.Errorf("parseAuthority(%q) = %+v, %v; want %q %d ok=%v", tc.in, a, err, tc.host, tc.port, tc.ok)
		}
	}
}

// FuzzParseAuthority checks that whatever the sandbox sends as a Host,
// an accepted authority is a normalised name that is safe to put in a
// URL and compare, and parses back to itself.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"api.example.com", "API.example.com.:443", "[::1]:80", "a@b", "1.2.3.4", "x:65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseAuthority(s)
		if err != nil {
			if a != (authority{}) {
				t.Fatalf("%q: error %v with a result %+v", s, err, a)
			}
			return
		}
		if a.host == "" || strings.HasSuffix(a.host, ".") || strings.HasPrefix(a.host, ".") || strings.Contains(a.host, "..") {
			t.Fatalf("%q: host %q", s, a.host)
		}
		for i := 0; i < len(a.host); i++ {
			c := a.host[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				t.Fatalf("%q: host %q has %q", s, a.host, c)
			}
		}
		if !strings.EqualFold(strings.TrimSuffix(strings.SplitN(s, ":", 2)[0], "."), a.host) {
			t.Fatalf("%q: host %q is not the one given", s, a.host)
		}
		again := a.host
		if a.port != 0 {
			again += ":" + strconv.Itoa(int(a.port))
		}
		b, err := parseAuthority(again)
		if err != nil || b != a {
			t.Fatalf("%q: %+v does not parse back from %q: %+v, %v", s, a, again, b, err)
		}
	})
}
