package netstack

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		in    string
		kind  sniffKind
		final bool
	}{
		{"", sniffOther, false},
		{"\x16", sniffOther, false},
		{"\x16\x03", sniffOther, false},
		{"\x16\x03\x01", sniffTLS, true},
		{"\x16\x03\x05", sniffOther, true},
		{"\x16\x02\x01", sniffOther, true},
		{"G", sniffOther, false},
		{"GE", sniffOther, false},
		{"GET ", sniffHTTP, true},
		{"GET /x HTTP/1.1", sniffHTTP, true},
		{"POST ", sniffHTTP, true},
		{"OPTIONS ", sniffHTTP, true},
		{"PRI * HTTP/2.0", sniffHTTP, true},
		{"get / HTTP/1.1", sniffOther, true},
		{"GETX ", sniffOther, true},
		{"SSH-2.0-OpenSSH", sniffOther, true},
		{"CONNECTX", sniffOther, true},
		{"\x00\x00\x00", sniffOther, true},
	}
	for _, c := range cases {
		kind, final := classify([]byte(c.in))
		if kind != c.kind || final != c.final {
			t.Errorf("classify(%q) = %v, %v; want %v, %v", c.in, kind, final, c.kind, c.final)
		}
	}
}

// FuzzClassify checks that classify decides within maxSniff bytes, and
// that a decision never changes when more bytes come.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\n", "\x16\x03\x01\x02\x00", "PRI * HTTP/2.0", "SSH-2.0-x", "POS", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, final := classify(b)
		if len(b) >= maxSniff && !final {
			t.Fatalf("classify(%q) undecided after %d bytes", b, len(b))
		}
		if !final {
			return
		}
		for i := 1; i <= len(b); i++ {
			k, f := classify(b[:i])
			if f {
				if k != kind {
					t.Fatalf("classify(%q) = %v, but its prefix %q decided %v", b, kind, b[:i], k)
				}
				break
			}
		}
	})
}
