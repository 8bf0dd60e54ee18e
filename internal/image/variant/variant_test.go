package variant

import (
	"slices"
	"strings"
	"testing"
)

func testSource() Source {
	return Source{Mirror: DefaultMirror, SecurityMirror: DefaultSecurityMirror, Suite: DefaultSuite, Arch: "amd64"}
}

func TestUnknownVariantListsKnown(t *testing.T) {
	_, err := Get("huge")
	if err == nil {
		t.Fatal("Get(huge) succeeded")
	}
	want := `unknown image variant "huge": the variants are minimal, standard, full`
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if IsVariant("huge") || !IsVariant("standard") {
		t.Fatal("IsVariant disagrees with Known")
	}
}

// Each variant holds what the one before it holds, and what it is said
// to add.
func TestVariantsGrow(t *testing.T) {
	vs := Known()
	if got := Names(); !slices.Equal(got, []string{"minimal", "standard", "full"}) {
		t.Fatalf("Names() = %v", got)
	}
	for i := 1; i < len(vs); i++ {
		for _, p := range vs[i-1].Packages {
			if !slices.Contains(vs[i].Packages, p) {
				t.Errorf("%s lacks %s of %s", vs[i].Name, p, vs[i-1].Name)
			}
		}
	}
	for name, pkgs := range map[string][]string{
		"minimal":  {"bash", "coreutils", "curl", "ca-certificates", "python3", "passwd"},
		"standard": {"python3-pip", "python3-venv", "python-is-python3", "nodejs", "npm", "git", "openssh-client", "gcc", "make", "libc6-dev"},
		"full":     {"python3-numpy", "python3-pandas", "ruby", "golang-go"},
	} {
		v, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			if !slices.Contains(v.Packages, p) {
				t.Errorf("%s lacks %s", name, p)
			}
		}
	}
}

// A key changes with what changes an image and with nothing else.
func TestKey(t *testing.T) {
	v, _ := Get("standard")
	src := testSource()
	k := v.Key(src)
	if !strings.HasPrefix(k, "sha256:") || len(k) != 71 {
		t.Fatalf("key %q", k)
	}
	shuffled := v
	shuffled.Packages = slices.Clone(v.Packages)
	slices.Reverse(shuffled.Packages)
	shuffled.Packages = append(shuffled.Packages, "git")
	if shuffled.Key(src) != k {
		t.Error("the key depends on the packages' order or repeats")
	}
	other := src
	other.Mirror = "http://mirror.example/debian"
	if v.Key(other) != k {
		t.Error("the key depends on the mirror")
	}
	for name, change := range map[string]func(*Source, *Variant){
		"suite":    func(s *Source, _ *Variant) { s.Suite = "trixie" },
		"arch":     func(s *Source, _ *Variant) { s.Arch = "arm64" },
		"security": func(s *Source, _ *Variant) { s.SecurityMirror = "" },
		"packages": func(_ *Source, v *Variant) { v.Packages = append(slices.Clone(v.Packages), "vim") },
	} {
		s, v2 := src, v
		change(&s, &v2)
		if v2.Key(s) == k {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
	m, _ := Get("minimal")
	if m.Key(src) == k {
		t.Error("minimal and standard share a key")
	}
}

func TestSourceFromEnv(t *testing.T) {
	t.Setenv(EnvMirror, "")
	t.Setenv(EnvSecurityMirror, "")
	t.Setenv(EnvSuite, "")
	s, err := SourceFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if s.Mirror != DefaultMirror || s.SecurityMirror != DefaultSecurityMirror || s.Suite != DefaultSuite || s.Arch == "" {
		t.Fatalf("default source %+v", s)
	}
	t.Setenv(EnvMirror, "http://127.0.0.1:3142/debian")
	t.Setenv(EnvSecurityMirror, "none")
	t.Setenv(EnvSuite, "trixie")
	s, err = SourceFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if s.Mirror != "http://127.0.0.1:3142/debian" || s.SecurityMirror != "" || s.Suite != "trixie" {
		t.Fatalf("source from the environment %+v", s)
	}
	for env, bad := range map[string]string{
		EnvMirror:         "deb.debian.org/debian",
		EnvSecurityMirror: "http://x/ y",
		EnvSuite:          "bookworm main\ndeb http://evil/",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(EnvMirror, "")
			t.Setenv(EnvSecurityMirror, "")
			t.Setenv(EnvSuite, "")
			t.Setenv(env, bad)
			if _, err := SourceFromEnv(); err == nil || !strings.Contains(err.Error(), env) {
				t.Fatalf("%s=%q: error %v, want one naming %s", env, bad, err, env)
			}
		})
	}
}
