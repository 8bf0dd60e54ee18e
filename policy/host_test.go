package policy

import (
	"strings"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"api.openai.com", "api.openai.com", true},
		{"API.OpenAI.Com", "api.openai.com", true},
		{"api.openai.com.", "api.openai.com", true},
		{"api.openai.com..", "", false},
		{"localhost", "localhost", true},
		{"_dmarc.example.com", "_dmarc.example.com", true},
		{"xn--bcher-kva.de", "xn--bcher-kva.de", true},
		{"a-b.c-d.io", "a-b.c-d.io", true},
		{long63 + ".com", long63 + ".com", true},
		{long63 + "a.com", "", false},
		{strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "a", true}, // 253
		{strings.Repeat("a.", 127) + "a", "", false},                             // 255
		{"", "", false},
		{".", "", false},
		{".com", "", false},
		{"a..com", "", false},
		{"bücher.de", "", false},
		{"ａpi.openai.com", "", false}, // fullwidth a
		{"api.openai.com:443", "", false},
		{"api openai.com", "", false},
		{"api.openai.com/", "", false},
		{"user@api.openai.com", "", false},
		{"*.openai.com", "", false},
		{"api.openai.com\x00", "", false},
		// Addresses, in every spelling a resolver accepts.
		{"10.0.0.1", "", false},
		{"127.1", "", false},
		{"127.0.0.1.", "", false},
		{"2130706433", "", false},
		{"0x7f000001", "", false},
		{"0x7f.0x0.0x0.0x1", "", false},
		{"0177.0.0.1", "", false},
		{"::1", "", false},
		{"[::1]", "", false},
		{"fe80::1%eth0", "", false},
		// Numbers inside are fine; a numeric last label is not.
		{"1.example.com", "1.example.com", true},
		{"example.123", "", false},
		{"example.0x", "", false}, // "0x" alone: empty hex, still numeric by the browser rule
		{"example.0xg", "example.0xg", true},
		{"123abc", "123abc", true},
	}
	for _, tt := range tests {
		got, ok := normalizeName(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("normalizeName(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern string
		name    string
		want    bool
	}{
		{"api.openai.com", "api.openai.com", true},
		{"api.openai.com", "API.OPENAI.COM.", true},
		{"API.OpenAI.com.", "api.openai.com", true},
		{"api.openai.com", "openai.com", false},
		{"api.openai.com", "x.api.openai.com", false},
		{"api.openai.com", "api.openai.com.evil.com", false},
		{"api.openai.com", "evilapi.openai.com", false},
		{"*.amazonaws.com", "s3.amazonaws.com", true},
		{"*.amazonaws.com", "s3.us-east-1.amazonaws.com", true},
		{"*.amazonaws.com", "a.b.c.d.amazonaws.com", true},
		{"*.amazonaws.com", "amazonaws.com", false},
		{"*.amazonaws.com", "evilamazonaws.com", false},
		{"*.amazonaws.com", "amazonaws.com.evil.com", false},
		{"*.amazonaws.com", ".amazonaws.com", false},
		{"*.amazonaws.com", "S3.AmazonAWS.com", true},
		{"*.com", "example.com", true},
		{"*.com", "com", false},
		{"*", "example.com", true},
		{"*", "a.b.example.co.uk", true},
		{"*", "localhost", false},
		{"*", "metadata", false},
		{"*", "db.internal", false},
		{"*", "metadata.google.internal", false},
		{"*", "printer.local", false},
		{"*", "foo.localhost", false},
		{"*", "1.0.0.10.in-addr.arpa", false},
		{"*", "router.home.arpa", false},
		{"*", "x.onion", false},
		{"*", "api.test", false},
		{"*", "10.0.0.1", false},
		{"*", "127.1", false},
		{"*", "", false},
		{"*.internal", "db.internal", true},
		{"db.internal", "db.internal", true},
		{"*.test", "api.test", true},
		{"localhost", "localhost", true},
		// Invalid patterns match nothing.
		{"a*b.com", "axb.com", false},
		{"*.", "com", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := MatchHost(tt.pattern, tt.name); got != tt.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestCompileGlobErrors(t *testing.T) {
	tests := []struct {
		pattern string
		errHas  string
	}{
		{"", "empty"},
		{" api.openai.com", "spaces"},
		{"*.", "no domain"},
		{"a*b.com", "'*' may only be"},
		{"*foo.com", "'*' may only be"},
		{"foo.*", "'*' may only be"},
		{"*.*.com", "'*' may only be"},
		{"**", "'*' may only be"},
		{"api.*.com", "'*' may only be"},
		{"https://api.openai.com/v1", `give the host name alone, as in "api.openai.com"`},
		{"api.openai.com:443", "has a port: give the host alone"},
		{"api.openai.com/v1", "without a port"},
		{"10.0.0.1", "is an address"},
		{"::1", "is an address"},
		{"[::1]", "is an address"},
		{"127.1", "is an address"},
		{"*.10.0.0.1", "is an address"},
		{"bücher.de", "punycode"},
		{"a..com", "not a valid host name"},
		{".com", "not a valid host name"},
		{"exa mple.com", "not a valid host name"},
		{strings.Repeat("a", 64) + ".com", "not a valid host name"},
	}
	for _, tt := range tests {
		err := CheckHostPattern(tt.pattern)
		if err == nil {
			t.Errorf("CheckHostPattern(%q) = nil, want an error with %q", tt.pattern, tt.errHas)
			continue
		}
		if !strings.Contains(err.Error(), tt.errHas) {
			t.Errorf("CheckHostPattern(%q) = %q, want it to say %q", tt.pattern, err, tt.errHas)
		}
	}
	for _, ok := range []string{"*", "*.com", "api.openai.com", "API.OPENAI.COM.", "*.amazonaws.com", "xn--bcher-kva.de", "_srv.example.com", "localhost"} {
		if err := CheckHostPattern(ok); err != nil {
			t.Errorf("CheckHostPattern(%q) = %v, want nil", ok, err)
		}
	}
}

func TestGlobText(t *testing.T) {
	for in, want := range map[string]string{
		"API.OpenAI.com.": "api.openai.com",
		"*.AmazonAWS.COM": "*.amazonaws.com",
		"*":               "*",
	} {
		g, err := compileGlob(in)
		if err != nil || g.text != want {
			t.Errorf("compileGlob(%q).text = %q, %v; want %q", in, g.text, err, want)
		}
	}
}
