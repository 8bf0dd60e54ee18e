package dist

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

const goodSHA = "3f2a9c1d7b4e00000000000000000000000000000000000000000000000000ff"

func TestParseManifest(t *testing.T) {
	good := `{"version":"1.0.0","artifacts":{"rootfs-standard-amd64":{"url":"r.tar.zst","sha256":"` + goodSHA + `","size":10,"config":{"env":["PATH=/bin"],"cmd":["sh"]}},"kernel-amd64":{"url":"https://cdn.example.com/k.gz","sha256":"` + goodSHA + `","size":5}}}`
	m, err := ParseManifest([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if m.Format != Format || m.Version != "1.0.0" || len(m.Artifacts) != 2 || m.Artifacts["rootfs-standard-amd64"].Config.Cmd[0] != "sh" {
		t.Fatalf("ParseManifest = %+v", m)
	}
	if v := m.Variants("amd64"); !reflect.DeepEqual(v, []string{"standard"}) {
		t.Errorf("Variants = %v", v)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"version":"1","artifacts":{"a":{"url":"x","sha265":"` + goodSHA + `","size":1}}}`, `unknown field "artifacts.a.sha265" (did you mean "artifacts.a.sha256"?)`},
		{`{"version":"1","artifacts":{}, "extra": 1}`, `unknown field "extra"`},
		{`{"format":2,"version":"1","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":1}}}`, "upgrade airlock"},
		{`{"version":"","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":1}}}`, "version"},
		{`{"version":"1","artifacts":{}}`, "no artifacts"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"ABC","size":1}}}`, "64 lower-case hex"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"` + strings.ToUpper(goodSHA) + `","size":1}}}`, "64 lower-case hex"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":0}}}`, "size 0"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":1099511627777}}}`, "size"},
		{`{"version":"1","artifacts":{"a":{"url":"","sha256":"` + goodSHA + `","size":1}}}`, "url"},
		{`{"version":"1","artifacts":{"a":{"url":"ftp://h/x","sha256":"` + goodSHA + `","size":1}}}`, `scheme "ftp"`},
		{`{"version":"1","artifacts":{"../a":{"url":"x","sha256":"` + goodSHA + `","size":1}}}`, "name"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":1,"config":{"env":["NOEQUALS"]}}}}`, "NAME=VALUE"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":"1"}}}`, "size"},
		{`{"version":"1","artifacts":[]}`, "artifacts"},
		{`{"version":"1","artifacts":{"a":{"url":"x","sha256":"` + goodSHA + `","size":1}}} {}`, "invalid"},
		{`[]`, "manifest"},
		{string(bytes.Repeat([]byte(" "), MaxManifestSize+1)), "more than"},
	} {
		_, err := ParseManifest([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseManifest(%.80q): %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestCheckVariant(t *testing.T) {
	for _, ok := range []string{"standard", "full", "my-team.v2", "a_b", "0"} {
		if err := CheckVariant(ok); err != nil {
			t.Errorf("CheckVariant(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "..", ".hidden", "a/b", "Standard", "a b", strings.Repeat("x", 65), "-x"} {
		if err := CheckVariant(bad); err == nil {
			t.Errorf("CheckVariant(%q) accepted it", bad)
		}
	}
}

// FuzzParseManifest checks that any input is refused or gives a
// manifest that passes its own checks and survives encoding: what was
// accepted is what is published again.
func FuzzParseManifest(f *testing.F) {
	for _, s := range []string{
		`{"version":"1.0.0","artifacts":{"rootfs-standard-amd64":{"url":"r.tar.zst","sha256":"` + goodSHA + `","size":10}}}`,
		`{"format":1,"version":"v","artifacts":{"erofs-full-arm64":{"url":"https://h/x","sha256":"` + goodSHA + `","size":1,"config":{"env":["A=b"],"working_dir":"/w","user":"1000","entrypoint":["e"],"cmd":["c"]}}}}`,
		`{"version":"1","artifacts":{"a":{"url":"x","sha265":"` + goodSHA + `","size":1}}}`,
		`{"version":"\u0000","artifacts":{"a":{"url":"%zz","sha256":"` + goodSHA + `","size":-1}}}`,
		`{"VERSION":"1","Artifacts":{"a":{"URL":"x","Sha256":"` + goodSHA + `","SIZE":1}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if m != nil {
				t.Fatal("a manifest with an error")
			}
			return
		}
		if err := m.Check(); err != nil {
			t.Fatalf("an accepted manifest fails its check: %v", err)
		}
		for name, a := range m.Artifacts {
			if checkName(name, maxName) != nil || len(a.SHA256) != 64 || a.Size <= 0 || a.Size > maxArtifactSize {
				t.Fatalf("accepted artifact %q: %+v", name, a)
			}
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("the encoding of an accepted manifest is refused: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("a manifest changed through encoding:\n%+v\n%+v", m, m2)
		}
	})
}
