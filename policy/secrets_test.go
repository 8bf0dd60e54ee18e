package policy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
)

const (
	openaiKey = "sk-openai-REAL-0123456789"
	awsKey    = "aws/REAL+key=="
	ghToken   = "ghp_REALtoken"
	ghToken2  = "ghp_OTHER_real"
)

func secretsPolicy(t *testing.T, scrub bool) *Policy {
	t.Helper()
	return newPolicy(t, Config{
		AllowedHosts: []string{"*"},
		Secrets: map[string]Secret{
			"OPENAI_API_KEY": {Value: openaiKey, Hosts: []string{"api.openai.com"}},
			"AWS_KEY":        {Value: awsKey, Hosts: []string{"*.amazonaws.com"}},
			"GH":             {Value: ghToken, Hosts: []string{"github.com", "api.github.com"}},
			"GH_TOKEN":       {Value: ghToken2, Hosts: []string{"github.com"}},
		},
		ScrubResponses: scrub,
	}, Options{})
}

var placeholderRE = regexp.MustCompile(`^AIRLOCK_SECRET_([A-Za-z_][A-Za-z0-9_]*)_[0-9a-f]{32}$`)

func TestPlaceholders(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	if len(env) != 4 {
		t.Fatalf("Env() = %v", env)
	}
	seen := map[string]bool{}
	for name, ph := range env {
		m := placeholderRE.FindStringSubmatch(ph)
		if m == nil || m[1] != name {
			t.Errorf("placeholder of %s = %q", name, ph)
		}
		if seen[ph] {
			t.Errorf("placeholder %q given twice", ph)
		}
		seen[ph] = true
		for _, v := range []string{openaiKey, awsKey, ghToken, ghToken2} {
			if strings.Contains(ph, v) {
				t.Errorf("placeholder %q holds a value", ph)
			}
		}
	}
	// Stable for the life of the policy, different in another one.
	again := p.Env()
	q := secretsPolicy(t, false)
	for name := range env {
		if again[name] != env[name] {
			t.Errorf("placeholder of %s changed", name)
		}
		if q.Env()[name] == env[name] {
			t.Errorf("two policies share the placeholder of %s", name)
		}
	}
	// The map is the caller's.
	env["OPENAI_API_KEY"] = "x"
	if p.Env()["OPENAI_API_KEY"] == "x" {
		t.Error("Env returns the policy's own map")
	}
}

func TestSubstituteScopes(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	tests := []struct {
		host  string
		in    string
		want  string
		leak  bool
		which string
	}{
		{"api.openai.com", "Bearer " + env["OPENAI_API_KEY"], "Bearer " + openaiKey, false, ""},
		{"API.OpenAI.com.", "Bearer " + env["OPENAI_API_KEY"], "Bearer " + openaiKey, false, ""},
		{"evil.com", "Bearer " + env["OPENAI_API_KEY"], "", true, "OPENAI_API_KEY"},
		{"openai.com", "Bearer " + env["OPENAI_API_KEY"], "", true, "OPENAI_API_KEY"},
		{"api.openai.com.evil.com", env["OPENAI_API_KEY"], "", true, "OPENAI_API_KEY"},
		{"s3.amazonaws.com", env["AWS_KEY"], awsKey, false, ""},
		{"a.b.s3.amazonaws.com", env["AWS_KEY"], awsKey, false, ""},
		{"amazonaws.com", env["AWS_KEY"], "", true, "AWS_KEY"},
		{"10.0.0.1", env["AWS_KEY"], "", true, "AWS_KEY"},
		{"", env["AWS_KEY"], "", true, "AWS_KEY"},
		// Overlapping names: GH and GH_TOKEN.
		{"github.com", env["GH"] + env["GH_TOKEN"] + env["GH"], ghToken + ghToken2 + ghToken, false, ""},
		{"api.github.com", env["GH"], ghToken, false, ""},
		{"api.github.com", env["GH"] + " " + env["GH_TOKEN"], "", true, "GH_TOKEN"},
		// Two secrets for one host, one for another.
		{"github.com", env["GH"] + env["OPENAI_API_KEY"], "", true, "OPENAI_API_KEY"},
		// Text that only looks like a placeholder is left alone.
		{"evil.com", "AIRLOCK_SECRET_GH_0000", "AIRLOCK_SECRET_GH_0000", false, ""},
		{"evil.com", env["GH"][:len(env["GH"])-1], env["GH"][:len(env["GH"])-1], false, ""},
		{"evil.com", strings.ToLower(env["GH"]), strings.ToLower(env["GH"]), false, ""},
		{"evil.com", "", "", false, ""},
		{"evil.com", "no placeholder", "no placeholder", false, ""},
	}
	for _, tt := range tests {
		s := p.Substituter(tt.host)
		got, err := s.String(tt.in)
		gotB, errB := s.Bytes([]byte(tt.in))
		if tt.leak {
			if !errors.Is(err, ErrSecretLeak) || !errors.Is(errB, ErrSecretLeak) || ReasonOf(err) != ReasonSecretLeak {
				t.Errorf("%s: %q: err %v, %v; want a leak", tt.host, tt.in, err, errB)
			} else if !strings.Contains(err.Error(), "secret "+tt.which+" ") {
				t.Errorf("%s: leak error %q does not name %s", tt.host, err, tt.which)
			}
			continue
		}
		if err != nil || errB != nil || got != tt.want || string(gotB) != tt.want {
			t.Errorf("%s: %q -> %q, %q (%v, %v); want %q", tt.host, tt.in, got, gotB, err, errB, tt.want)
		}
	}
}

func TestSubstituteRequest(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	req := func() *Request {
		return &Request{
			Method: "POST",
			URL:    "https://api.openai.com/v1/x?key=" + env["OPENAI_API_KEY"],
			Host:   "api.openai.com",
			Header: http.Header{
				"Authorization": {"Bearer " + env["OPENAI_API_KEY"]},
				"X-Other":       {"a", env["OPENAI_API_KEY"]},
			},
			Body: []byte(`{"key": "` + env["OPENAI_API_KEY"] + `"}`),
		}
	}
	r := req()
	if err := p.Substituter(r.Host).Request(r); err != nil {
		t.Fatal(err)
	}
	if r.URL != "https://api.openai.com/v1/x?key="+openaiKey || r.Header.Get("Authorization") != "Bearer "+openaiKey ||
		r.Header["X-Other"][1] != openaiKey || string(r.Body) != `{"key": "`+openaiKey+`"}` {
		t.Errorf("rewritten request: %+v %s", r, r.Body)
	}

	// The placeholder to the wrong host, in each part of the request.
	for part, mutate := range map[string]func(*Request){
		"header": func(r *Request) { r.Header.Set("X-Leak", env["AWS_KEY"]) },
		"query":  func(r *Request) { r.URL += "&x=" + env["AWS_KEY"] },
		"path":   func(r *Request) { r.URL = "https://api.openai.com/" + env["GH"] },
		"body":   func(r *Request) { r.Body = append(r.Body, env["GH_TOKEN"]...) },
		"basic":  func(r *Request) { r.Header.Set("Authorization", "Basic "+b64("user:"+env["GH"])) },
	} {
		r := req()
		mutate(r)
		if err := p.Substituter(r.Host).Request(r); !errors.Is(err, ErrSecretLeak) {
			t.Errorf("%s: err = %v, want a leak", part, err)
		}
	}

	// The right host's placeholder in the body and the wrong one's in a
	// header: the whole request is a leak.
	r = &Request{Method: "POST", URL: "https://github.com/", Host: "github.com",
		Header: http.Header{"X-Key": {env["OPENAI_API_KEY"]}},
		Body:   []byte(env["GH"])}
	if err := p.Substituter(r.Host).Request(r); !errors.Is(err, ErrSecretLeak) {
		t.Errorf("right body, wrong header: %v", err)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestSubstituteHeaderAndURL(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	s := p.Substituter("github.com")
	got, err := s.Header("authorization", "Basic "+b64("x-access-token:"+env["GH"]))
	if err != nil || got != "Basic "+b64("x-access-token:"+ghToken) {
		t.Errorf("Basic: %q, %v", got, err)
	}
	got, err = s.Header("Proxy-Authorization", "basic "+b64(env["GH_TOKEN"]+":"))
	if err != nil || got != "basic "+b64(ghToken2+":") {
		t.Errorf("Proxy Basic: %q, %v", got, err)
	}
	got, err = s.Header("Authorization", "Basic not-base64 "+env["GH"])
	if err != nil || got != "Basic not-base64 "+ghToken {
		t.Errorf("bad Basic: %q, %v", got, err)
	}
	got, err = s.Header("X-Token", env["GH"])
	if err != nil || got != ghToken {
		t.Errorf("plain header: %q, %v", got, err)
	}

	// AWS_KEY has '/', '+' and '=': percent-encoded in a URL only.
	a := p.Substituter("s3.amazonaws.com")
	u, err := a.URL("https://s3.amazonaws.com/b/" + env["AWS_KEY"] + "?k=" + env["AWS_KEY"])
	if err != nil || u != "https://s3.amazonaws.com/b/aws%2FREAL%2Bkey%3D%3D?k=aws%2FREAL%2Bkey%3D%3D" {
		t.Errorf("URL: %q, %v", u, err)
	}
	if h, _ := a.Header("X-Key", env["AWS_KEY"]); h != awsKey {
		t.Errorf("header: %q", h)
	}
	if _, err := a.URL("https://s3.amazonaws.com/" + env["GH"]); !errors.Is(err, ErrSecretLeak) {
		t.Errorf("URL leak: %v", err)
	}
}

func TestSubstituteUnsafeHeaderValue(t *testing.T) {
	key := "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"
	p := newPolicy(t, Config{Secrets: map[string]Secret{"PEM": {Value: key, Hosts: []string{"vault.example.com"}}}}, Options{})
	ph := p.Env()["PEM"]
	s := p.Substituter("vault.example.com")
	if _, err := s.Header("X-Key", ph); !errors.Is(err, ErrSecretUnrewritable) {
		t.Errorf("header with a line break: %v", err)
	}
	if got, err := s.Header("Authorization", "Basic "+b64("u:"+ph)); err != nil || got != "Basic "+b64("u:"+key) {
		t.Errorf("Basic with a line break: %q, %v", got, err)
	}
	if got, err := s.Header("X-Other", "no placeholder"); err != nil || got != "no placeholder" {
		t.Errorf("header without placeholder: %q, %v", got, err)
	}
	if b, err := s.Bytes([]byte("k=" + ph)); err != nil || string(b) != "k="+key {
		t.Errorf("body: %q, %v", b, err)
	}
	if u, err := s.URL("https://vault.example.com/?k=" + ph); err != nil || strings.ContainsAny(u, "\n") {
		t.Errorf("URL: %q, %v", u, err)
	}
}

// chunkReader returns the chunks one per Read.
type chunkReader struct{ chunks [][]byte }

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func splitAt(b []byte, offs ...int) io.Reader {
	var chunks [][]byte
	prev := 0
	for _, o := range offs {
		chunks = append(chunks, b[prev:o])
		prev = o
	}
	chunks = append(chunks, b[prev:])
	return &chunkReader{chunks: chunks}
}

func readAllErr(r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	_, err := io.Copy(&out, r)
	return out.Bytes(), err
}

// TestStreamEverySplit splits bodies at every offset (and at every pair
// of offsets for a short one) and checks that the stream gives what the
// whole-buffer rewrite gives.
func TestStreamEverySplit(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	s := p.Substituter("github.com")
	bodies := []string{
		env["GH"],
		"x" + env["GH"] + "y",
		env["GH"] + env["GH_TOKEN"],
		"A" + env["GH_TOKEN"] + "AIRLOCK_SECRET_" + env["GH"] + "AIRLOCK_SECRET_GH",
		strings.Repeat("AIRLOCK_SECRET_G", 3) + env["GH"][:20] + env["GH"],
		"no placeholder at all",
		"",
	}
	for _, body := range bodies {
		want, err := s.Bytes([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(want, []byte(env["GH"])) || bytes.Contains(want, []byte(env["GH_TOKEN"])) {
			t.Fatalf("whole-buffer rewrite left a placeholder: %q", want)
		}
		b := []byte(body)
		for i := 0; i <= len(b); i++ {
			got, err := readAllErr(s.Reader(splitAt(b, i), -1))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("split at %d of %q: %q, %v; want %q", i, body, got, err, want)
			}
		}
		if len(b) < 120 {
			for i := 0; i <= len(b); i++ {
				for j := i; j <= len(b); j++ {
					got, err := readAllErr(s.Reader(splitAt(b, i, j), -1))
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("split at %d, %d of %q: %q, %v", i, j, body, got, err)
					}
				}
			}
		}
		for name, r := range map[string]io.Reader{
			"one byte": iotest.OneByteReader(bytes.NewReader(b)),
			"half":     iotest.HalfReader(bytes.NewReader(b)),
			"data err": iotest.DataErrReader(bytes.NewReader(b)),
		} {
			got, err := readAllErr(s.Reader(r, -1))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s reader on %q: %q, %v", name, body, got, err)
			}
		}
	}
}

func TestStreamLeakEverySplit(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	s := p.Substituter("github.com")
	body := []byte("start " + env["GH"] + " middle " + env["OPENAI_API_KEY"] + " end " + env["GH"])
	for i := 0; i <= len(body); i++ {
		out, err := readAllErr(s.Reader(splitAt(body, i), -1))
		if !errors.Is(err, ErrSecretLeak) {
			t.Fatalf("split at %d: err = %v, want a leak", i, err)
		}
		if bytes.Contains(out, []byte(openaiKey)) || bytes.Contains(out, []byte(env["OPENAI_API_KEY"][:len(PlaceholderPrefix)+3])) {
			t.Fatalf("split at %d: the leaked placeholder or its value came out: %q", i, out)
		}
		if !bytes.HasPrefix([]byte("start "+ghToken+" middle "), out) {
			t.Fatalf("split at %d: released %q", i, out)
		}
	}
	// The error is sticky.
	r := s.Reader(bytes.NewReader(body), -1)
	_, _ = readAllErr(r)
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, ErrSecretLeak) {
		t.Errorf("second read: %v", err)
	}
}

func TestStreamLimit(t *testing.T) {
	p := secretsPolicy(t, false)
	env := p.Env()
	s := p.Substituter("github.com")
	body := []byte(strings.Repeat("x", 100) + env["GH"])
	got, err := readAllErr(s.Reader(bytes.NewReader(body), int64(len(body))))
	if err != nil || string(got) != strings.Repeat("x", 100)+ghToken {
		t.Errorf("at the limit: %q, %v", got, err)
	}
	got, err = readAllErr(s.Reader(bytes.NewReader(body), int64(len(body)-1)))
	if !errors.Is(err, ErrSecretUnrewritable) || ReasonOf(err) != ReasonSecretUnrewritable {
		t.Errorf("past the limit: err = %v", err)
	}
	if bytes.Contains(got, []byte(PlaceholderPrefix)) || bytes.Contains(got, []byte(ghToken)) {
		t.Errorf("past the limit, released %q", got)
	}
	if _, err := readAllErr(s.Reader(bytes.NewReader(nil), 0)); err != nil {
		t.Errorf("empty body, limit 0: %v", err)
	}
	if _, err := readAllErr(s.Reader(bytes.NewReader([]byte("x")), 0)); !errors.Is(err, ErrSecretUnrewritable) {
		t.Errorf("one byte, limit 0: %v", err)
	}
	// A big body with placeholders throughout, streamed.
	var big bytes.Buffer
	var want bytes.Buffer
	for i := 0; big.Len() < 1<<20; i++ {
		big.WriteString(env["GH"])
		big.WriteString(strings.Repeat("y", i%97))
		want.WriteString(ghToken)
		want.WriteString(strings.Repeat("y", i%97))
	}
	got, err = readAllErr(s.Reader(&big, -1))
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("1 MiB body: %d bytes, %v; want %d", len(got), err, want.Len())
	}
}

func TestStreamSourceError(t *testing.T) {
	p := secretsPolicy(t, false)
	boom := errors.New("boom")
	r := p.Substituter("github.com").Reader(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), -1)
	if _, err := readAllErr(r); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestNoSecretsPassThrough(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"*"}}, Options{})
	src := strings.NewReader("AIRLOCK_SECRET_X_00000000000000000000000000000000")
	if r := p.Substituter("example.com").Reader(src, 0); r != io.Reader(src) {
		t.Error("Reader wraps when there are no secrets")
	}
	if r := p.Scrubber().Reader(src); r != io.Reader(src) {
		t.Error("Scrubber wraps when there is nothing to scrub")
	}
	if err := p.CheckBodyEncoding("gzip"); err != nil {
		t.Errorf("CheckBodyEncoding without secrets: %v", err)
	}
}

func TestCheckBodyEncoding(t *testing.T) {
	p := secretsPolicy(t, false)
	for _, enc := range []string{"", "identity"} {
		if err := p.CheckBodyEncoding(enc); err != nil {
			t.Errorf("%q: %v", enc, err)
		}
	}
	for _, enc := range []string{"gzip", "br", "deflate", "zstd", "gzip, identity"} {
		if err := p.CheckBodyEncoding(enc); !errors.Is(err, ErrSecretUnrewritable) {
			t.Errorf("%q: %v", enc, err)
		}
	}
}

func TestScrub(t *testing.T) {
	p := secretsPolicy(t, true)
	env := p.Env()
	sc := p.Scrubber()
	if !p.ScrubsResponses() {
		t.Fatal("ScrubsResponses = false")
	}
	in := "echo: " + openaiKey + " and " + ghToken + ghToken2 + " " + awsKey
	want := "echo: " + env["OPENAI_API_KEY"] + " and " + env["GH"] + env["GH_TOKEN"] + " " + env["AWS_KEY"]
	if got := sc.String(in); got != want {
		t.Errorf("Scrub = %q, want %q", got, want)
	}
	b := []byte(in)
	for i := 0; i <= len(b); i++ {
		got, err := readAllErr(sc.Reader(splitAt(b, i)))
		if err != nil || string(got) != want {
			t.Fatalf("split at %d: %q, %v", i, got, err)
		}
	}
	h := http.Header{"X-Echo": {openaiKey, "fine"}}
	sc.Header(h)
	if h["X-Echo"][0] != env["OPENAI_API_KEY"] || h["X-Echo"][1] != "fine" {
		t.Errorf("Header: %q", h)
	}
	clean := []byte("nothing secret")
	if got := sc.Bytes(clean); &got[0] != &clean[0] {
		t.Error("Bytes copied clean data")
	}

	// Every response of every host only when asked for.
	off := secretsPolicy(t, false)
	if got := off.Scrubber().String(in); got != in || off.Scrubber().Active() {
		t.Errorf("scrubbed every response without scrub_responses: %q", got)
	}
}

func TestScrubOverlappingValues(t *testing.T) {
	p := newPolicy(t, Config{
		ScrubResponses: true,
		Secrets: map[string]Secret{
			"SHORT": {Value: "abc", Hosts: []string{"a.example.com"}},
			"LONG":  {Value: "abcdef", Hosts: []string{"a.example.com"}},
			"MID":   {Value: "cde", Hosts: []string{"a.example.com"}},
		},
	}, Options{})
	env := p.Env()
	in := []byte("abcdef abc abcde cde")
	want := env["LONG"] + " " + env["SHORT"] + " " + env["SHORT"] + "de " + env["MID"]
	if got := p.Scrubber().String(string(in)); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			got, err := readAllErr(p.Scrubber().Reader(splitAt(in, i, j)))
			if err != nil || string(got) != want {
				t.Fatalf("split at %d, %d: %q, %v", i, j, got, err)
			}
		}
	}
}

func TestBytesNoCopy(t *testing.T) {
	p := secretsPolicy(t, false)
	b := []byte("plain body with AIRLOCK_SECRET_ but no placeholder")
	got, err := p.Substituter("github.com").Bytes(b)
	if err != nil || &got[0] != &b[0] {
		t.Errorf("Bytes copied a body with nothing to replace (%v)", err)
	}
}

// TestResponseScrubberCoversEncodedCredentials: Basic credentials that
// the Substituter re-encoded with a value inside come back to the
// sandbox as the sandbox sent them, with or without scrub_responses,
// since the host they were sent to is the one answering.
func TestResponseScrubberCoversEncodedCredentials(t *testing.T) {
	for _, scrub := range []bool{false, true} {
		p := secretsPolicy(t, scrub)
		ph := p.Env()["OPENAI_API_KEY"]
		s := p.Substituter("api.openai.com")
		orig := base64.StdEncoding.EncodeToString([]byte("user:" + ph))
		got, err := s.Header("Authorization", "Basic "+orig)
		if err != nil {
			t.Fatal(err)
		}
		sent := strings.TrimPrefix(got, "Basic ")
		if dec, _ := base64.StdEncoding.DecodeString(sent); string(dec) != "user:"+openaiKey {
			t.Fatalf("sent %q", dec)
		}
		echo := `{"authorization": "Basic ` + sent + `", "key": "` + openaiKey + `"}`
		sc := p.ResponseScrubber(s)
		if !sc.Active() {
			t.Fatalf("scrub_responses=%v: the scrubber of a secret's own host is inactive", scrub)
		}
		out := sc.String(echo)
		if strings.Contains(out, sent) || strings.Contains(out, openaiKey) {
			t.Errorf("scrub_responses=%v: the value got through: %s", scrub, out)
		}
		if !strings.Contains(out, orig) || !strings.Contains(out, ph) {
			t.Errorf("scrub_responses=%v: the sandbox's own forms are not restored: %s", scrub, out)
		}
		// The scrubber is built once per Substituter, and again when a
		// new credential is re-encoded.
		if p.ResponseScrubber(s) != sc {
			t.Error("a second call built a new scrubber")
		}
	}
}

// TestResponseScrubberScope: without scrub_responses, a response is
// scrubbed of the values of the secrets scoped to its request's host, in
// each form, and of nothing else; with it, of every value in each form.
func TestResponseScrubberScope(t *testing.T) {
	echo := "openai " + openaiKey + " aws " + awsKey + " aws-in-url " + escapeURLValue(awsKey) + " gh " + ghToken
	for _, scrub := range []bool{false, true} {
		p := secretsPolicy(t, scrub)
		env := p.Env()
		for _, c := range []struct {
			host string
			want string
		}{
			{"api.openai.com", "openai " + env["OPENAI_API_KEY"] + " aws " + awsKey + " aws-in-url " + escapeURLValue(awsKey) + " gh " + ghToken},
			{"s3.amazonaws.com", "openai " + openaiKey + " aws " + env["AWS_KEY"] + " aws-in-url " + env["AWS_KEY"] + " gh " + ghToken},
			{"example.com", echo},
		} {
			want := c.want
			if scrub {
				// Every value, in every form.
				want = "openai " + env["OPENAI_API_KEY"] + " aws " + env["AWS_KEY"] + " aws-in-url " + env["AWS_KEY"] + " gh " + env["GH"]
			}
			sc := p.ResponseScrubber(p.Substituter(c.host))
			if got := sc.String(echo); got != want {
				t.Errorf("scrub_responses=%v, %s:\n got %s\nwant %s", scrub, c.host, got, want)
			}
			if active := sc.Active(); active != (scrub || c.host != "example.com") {
				t.Errorf("scrub_responses=%v, %s: Active = %v", scrub, c.host, active)
			}
		}
	}
}
