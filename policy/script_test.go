package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func scriptPolicy(t *testing.T, src string, opts Options) *Policy {
	t.Helper()
	return newPolicy(t, Config{AllowedHosts: []string{"*"}, PolicyScript: src}, opts)
}

func testRequest() *Request {
	return &Request{
		Method: "GET",
		URL:    "https://api.example.com/v1/items?q=1",
		Host:   "api.example.com",
		Header: http.Header{"Accept": {"application/json"}, "X-Multi": {"a", "b"}},
		Body:   []byte("hello"),
	}
}

// wantPolicyError checks that err blocks with policy_error and says
// every part of wants.
func wantPolicyError(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error, want a policy error")
	}
	if ReasonOf(err) != ReasonPolicyError || !errors.Is(err, ErrPolicy) {
		t.Errorf("reason %q (%v), want %s", ReasonOf(err), err, ReasonPolicyError)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestScriptIsHostAllowedNarrows(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	p := newPolicy(t, Config{
		AllowedHosts: []string{"*.example.com", "other.com"},
		PolicyScript: `
def is_host_allowed(host):
    print(host)
    if host == "boom.example.com":
        return 1 // 0
    if host == "int.example.com":
        return 1
    return host.endswith(".example.com") and not host.startswith("no.")
`,
	}, Options{ScriptPrint: func(msg string) { mu.Lock(); asked = append(asked, msg); mu.Unlock() }})
	tests := []struct {
		host string
		ok   bool
		code string
	}{
		{"api.example.com", true, ""},
		{"API.Example.com.", true, ""},
		{"no.example.com", false, ReasonScriptDenied},
		{"other.com", false, ReasonScriptDenied},  // in the allowlist, refused by the script
		{"evil.com", false, ReasonHostNotAllowed}, // the script cannot widen the allowlist
		{"boom.example.com", false, ReasonPolicyError},
		{"int.example.com", false, ReasonPolicyError},
	}
	for _, tt := range tests {
		ok, reason := p.HostDecision(tt.host)
		if ok != tt.ok || ReasonCode(reason) != tt.code {
			t.Errorf("HostDecision(%q) = %v, %q; want %v, %s", tt.host, ok, reason, tt.ok, tt.code)
		}
	}
	_, reason := p.HostDecision("boom.example.com")
	if !strings.Contains(reason, "policy_script:5:") || !strings.Contains(reason, "division by zero") || !strings.Contains(reason, "in is_host_allowed") {
		t.Errorf("script fault reason %q lacks the line or the fault", reason)
	}
	_, reason = p.HostDecision("int.example.com")
	if !strings.Contains(reason, "want True or False") {
		t.Errorf("non-bool reason %q", reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(asked, "evil.com") {
		t.Error("the script was asked about a host the allowlist refuses")
	}
	// Answers are cached; faults are not.
	if n := countOf(asked, "api.example.com"); n != 1 {
		t.Errorf("is_host_allowed(api.example.com) ran %d times", n)
	}
	if n := countOf(asked, "boom.example.com"); n != 2 {
		t.Errorf("is_host_allowed(boom.example.com) ran %d times, want 2 (faults are not cached)", n)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func TestScriptAppliesToEgressNames(t *testing.T) {
	p := newPolicy(t, Config{
		Egress:       []EgressRule{{Destination: "*.example.com", Ports: []uint16{22}}},
		PolicyScript: "def is_host_allowed(host):\n    return host != \"no.example.com\"\n",
	}, Options{})
	if ok, _ := p.FlowAllowed("tcp", []string{"git.example.com"}, mustAddr("1.2.3.4"), 22); !ok {
		t.Error("git.example.com refused")
	}
	if ok, _ := p.FlowAllowed("tcp", []string{"no.example.com"}, mustAddr("1.2.3.4"), 22); ok {
		t.Error("no.example.com allowed despite the script")
	}
	if ok, _ := p.NameResolvable("no.example.com"); ok {
		t.Error("no.example.com resolvable despite the script")
	}
	if ok, _ := p.NameResolvable("git.example.com"); !ok {
		t.Error("git.example.com not resolvable")
	}
}

func TestScriptOnRequestModifies(t *testing.T) {
	p := scriptPolicy(t, `
def on_request(req):
    req.headers["X-Added"] = "yes"
    req.headers["x-lower"] = ["1", "2"]
    req.headers["X-Multi"] = req.headers["X-Multi"] + ["c"]
    req["method"] = "POST"
    req.url = req.url.replace("/v1/", "/v2/")
    req.body = req.body + " world"
    req.headers.pop("Accept")
    return req
`, Options{})
	in := testRequest()
	orig := in.Clone()
	out, err := p.FilterRequest(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"X-Added": {"yes"}, "X-Lower": {"1", "2"}, "X-Multi": {"a", "b", "c"}}
	if fmt.Sprint(out.Header) != fmt.Sprint(want) {
		t.Errorf("headers %v, want %v", out.Header, want)
	}
	if out.Method != "POST" || out.URL != "https://api.example.com/v2/items?q=1" || string(out.Body) != "hello world" || out.Host != "api.example.com" {
		t.Errorf("request %+v", out)
	}
	if fmt.Sprint(in) != fmt.Sprint(orig) {
		t.Errorf("FilterRequest modified its argument: %+v", in)
	}
}

func TestScriptOnRequestBlocks(t *testing.T) {
	p := scriptPolicy(t, `
def on_request(req):
    if "facebook" in req.host or req.method == "DELETE":
        return None
    return req
`, Options{})
	r := testRequest()
	r.Method = "DELETE"
	_, err := p.FilterRequest(context.Background(), r)
	if !errors.Is(err, ErrScriptBlocked) || ReasonOf(err) != ReasonScriptBlocked {
		t.Errorf("DELETE: %v", err)
	}
	if out, err := p.FilterRequest(context.Background(), testRequest()); err != nil || out.Method != "GET" {
		t.Errorf("GET: %v", err)
	}
}

func TestScriptStepLimit(t *testing.T) {
	p := scriptPolicy(t, `
def on_request(req):
    n = 0
    while True:
        n += 1
    return req
`, Options{ScriptMaxSteps: 100_000, ScriptTimeout: time.Minute})
	start := time.Now()
	_, err := p.FilterRequest(context.Background(), testRequest())
	wantPolicyError(t, err, "more than 100000 steps", "policy_script:5:", "in on_request")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stopping took %v", d)
	}
}

func TestScriptTimeout(t *testing.T) {
	for name, body := range map[string]string{
		"while": "    while True:\n        pass\n",
		"range": "    for i in range(1 << 60):\n        pass\n",
		"sort":  "    for i in range(1 << 60):\n        sorted(range(1000))\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := scriptPolicy(t, "def on_request(req):\n"+body+"    return req\n", Options{ScriptMaxSteps: 1 << 62, ScriptMaxAlloc: 1 << 62, ScriptTimeout: 50 * time.Millisecond})
			start := time.Now()
			_, err := p.FilterRequest(context.Background(), testRequest())
			wantPolicyError(t, err, "longer than 50ms", "policy_script:")
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("stopping took %v", d)
			}
		})
	}
}

func TestScriptContextCancel(t *testing.T) {
	p := scriptPolicy(t, "def on_request(req):\n    while True:\n        pass\n", Options{ScriptMaxSteps: 1 << 62, ScriptTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := p.FilterRequest(ctx, testRequest())
	wantPolicyError(t, err, "deadline exceeded")
}

func TestScriptRuntimeErrors(t *testing.T) {
	tests := []struct {
		name, src string
		wants     []string
	}{
		{"division", "def on_request(req):\n    x = 1\n    return x // 0\n", []string{"policy_script:3:14: in on_request: floored division by zero"}},
		{"fail", "def on_request(req):\n    fail(\"nope\")\n", []string{"policy_script:2:", "nope"}},
		{"deep", "def helper(x):\n    return x[10]\n\ndef on_request(req):\n    return helper([])\n", []string{"policy_script:2:13", "index 10 out of range"}},
		{"returns int", "def on_request(req):\n    return 42\n", []string{"policy_script:1:1: in on_request: returned int, want the request or None"}},
		{"returns dict", "def on_request(req):\n    return {\"method\": \"GET\"}\n", []string{"returned dict"}},
		{"host read-only", "def on_request(req):\n    req.host = \"evil.com\"\n    return req\n", []string{"policy_script:2:", "req", "read-only"}},
		{"url host", "def on_request(req):\n    req.url = \"https://evil.com/x\"\n    return req\n", []string{"on_request: changed the url's host"}},
		{"url userinfo host", "def on_request(req):\n    req.url = \"https://api.example.com@evil.com/x\"\n    return req\n", []string{"changed the url's host"}},
		{"header injection", "def on_request(req):\n    req.headers[\"X-A\"] = \"a\\r\\nX-Injected: 1\"\n    return req\n", []string{"line break"}},
		{"bad header name", "def on_request(req):\n    req.headers[\"Bad Name\"] = \"a\"\n    return req\n", []string{"header name"}},
		{"host header", "def on_request(req):\n    req.headers[\"Host\"] = \"evil.com\"\n    return req\n", []string{"Host header"}},
		{"header value type", "def on_request(req):\n    req.headers[\"X-A\"] = 1\n    return req\n", []string{"want a string or a list of strings, not int"}},
		{"header list type", "def on_request(req):\n    req.headers[\"X-A\"] = [1]\n    return req\n", []string{"values are strings, not int"}},
		{"headers type", "def on_request(req):\n    req.headers = 1\n    return req\n", []string{"headers must be a dict"}},
		{"body type", "def on_request(req):\n    req.body = 1\n    return req\n", []string{"body must be a string, bytes or None"}},
		{"unknown field", "def on_request(req):\n    req.cookies = 1\n    return req\n", []string{"no field \"cookies\""}},
		{"empty method", "def on_request(req):\n    req.method = \"\"\n    return req\n", []string{"no method"}},
		{"secrets global", "def on_request(req):\n    return secrets[\"X\"]\n", []string{"undefined: secrets"}},
		{"recursion", "def f(n):\n    return f(n)\n\ndef on_request(req):\n    return f(1)\n", []string{"called recursively"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(Config{AllowedHosts: []string{"*"}, PolicyScript: tt.src}, Options{})
			if err != nil {
				wantConfigError(t, err, tt.wants...)
				return
			}
			_, err = p.FilterRequest(context.Background(), testRequest())
			wantPolicyError(t, err, tt.wants...)
		})
	}
}

func wantConfigError(t *testing.T, err error, wants ...string) {
	t.Helper()
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %T %v, want *ConfigError", err, err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestScriptLoadErrors(t *testing.T) {
	tests := []struct {
		name, src string
		opts      Options
		wants     []string
	}{
		{"syntax", "def on_request(req):\n    return req\n  x = 1\n", Options{}, []string{"policy_script:3:"}},
		{"top-level fault", "x = [1, 2]\ny = x[5]\ndef on_request(req):\n    return req\n", Options{}, []string{"policy_script:2:6:", "index 5 out of range"}},
		{"top-level loop", "def f():\n    while True:\n        pass\n\nf()\n", Options{ScriptMaxSteps: 10_000}, []string{"policy_script:", "more than 10000 steps"}},
		{"no hooks", "x = 1\n", Options{}, []string{"defines none of is_host_allowed(host), on_request(req), on_response(resp, req) and on_file(op, path, size)"}},
		{"is_allowed", "def is_allowed(host):\n    return True\n", Options{}, []string{"policy_script:1:1", "did you mean is_host_allowed(host)?"}},
		{"arity", "def on_response(resp):\n    return resp\n", Options{}, []string{"on_response takes 1 parameters: define it as def on_response(resp, req)"}},
		{"not a function", "is_host_allowed = True\n", Options{}, []string{"is_host_allowed is a bool"}},
		{"on_file arity", "def on_file(op, path):\n    return True\n", Options{}, []string{"policy_script:1:1:", "on_file takes 2 parameters: define it as def on_file(op, path, size)"}},
		{"on_file kwonly", "def on_file(op, path, size, *, x = 1):\n    return True\n", Options{}, []string{"define it as def on_file(op, path, size)"}},
		{"on_file not a function", "on_file = \"EPERM\"\n", Options{}, []string{"on_file is a string: define it as def on_file(op, path, size)"}},
		{"load", "load(\"other.star\", \"f\")\n", Options{}, []string{"cannot load modules"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{PolicyScript: tt.src}, tt.opts)
			wantConfigError(t, err, tt.wants...)
		})
	}
}

func TestScriptOnResponse(t *testing.T) {
	p := scriptPolicy(t, `
def on_response(resp, req):
    if resp.status_code == 418:
        return None
    if req.method == "PUT":
        req.method = "GET"
    resp.headers["X-Seen"] = req.url
    resp.body = resp.body.upper()
    resp.status_code = 299
    return resp
`, Options{})
	req := testRequest()
	resp := &Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("ok")}
	out, err := p.FilterResponse(context.Background(), resp, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.StatusCode != 299 || string(out.Body) != "OK" || out.Header.Get("X-Seen") != req.URL || out.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("response %+v", out)
	}
	if string(resp.Body) != "ok" {
		t.Error("FilterResponse modified its argument")
	}
	_, err = p.FilterResponse(context.Background(), &Response{StatusCode: 418, Header: http.Header{}}, req)
	if !errors.Is(err, ErrScriptBlocked) {
		t.Errorf("418: %v", err)
	}
	req.Method = "PUT"
	_, err = p.FilterResponse(context.Background(), resp, req)
	wantPolicyError(t, err, "read-only")

	// A streamed body is None, and may stay None.
	p = scriptPolicy(t, "def on_response(resp, req):\n    if resp.body != None:\n        fail(\"body\")\n    return resp\n", Options{})
	if out, err := p.FilterResponse(context.Background(), &Response{StatusCode: 200, Header: http.Header{}}, req); err != nil || out.Body != nil {
		t.Errorf("streamed body: %v, %v", out, err)
	}
	p = scriptPolicy(t, "def on_response(resp, req):\n    resp.status_code = 5\n    return resp\n", Options{})
	_, err = p.FilterResponse(context.Background(), resp, req)
	wantPolicyError(t, err, "status code 5")
}

func TestScriptSeesPlaceholders(t *testing.T) {
	var seen []string
	p := newPolicy(t, Config{
		AllowedHosts: []string{"api.example.com"},
		Secrets:      map[string]Secret{"KEY": {Value: "real-value", Hosts: []string{"api.example.com"}}},
		PolicyScript: "def on_request(req):\n    print(str(req.headers) + req.url + str(req.body))\n    return req\n",
	}, Options{ScriptPrint: func(s string) { seen = append(seen, s) }})
	ph := p.Env()["KEY"]
	req := testRequest()
	req.Header.Set("Authorization", "Bearer "+ph)
	req.URL += "&k=" + ph
	req.Body = []byte(ph)
	out, err := p.FilterRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || strings.Contains(seen[0], "real-value") || strings.Count(seen[0], ph) != 3 {
		t.Errorf("the script saw %q", seen)
	}
	// Substitution comes after the hooks.
	if err := p.Substituter(out.Host).Request(out); err != nil {
		t.Fatal(err)
	}
	if out.Header.Get("Authorization") != "Bearer real-value" || string(out.Body) != "real-value" {
		t.Errorf("after substitution: %+v", out)
	}
}

func TestGoHooks(t *testing.T) {
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	p := newPolicy(t, Config{
		AllowedHosts: []string{"*"},
		PolicyScript: "def on_request(req):\n    print(\"script\")\n    req.headers[\"X-Script\"] = \"1\"\n    return req\n",
	}, Options{
		ScriptPrint: note,
		OnRequest: func(ctx context.Context, req *Request) (*Request, error) {
			note("go")
			if req.Header.Get("X-Script") != "1" {
				return nil, errors.New("the script did not run first")
			}
			switch req.Method {
			case "BLOCK":
				return nil, nil
			case "ERR":
				return nil, errors.New("hook says no")
			case "PANIC":
				panic("hook panic")
			case "SLOW":
				<-ctx.Done()
				time.Sleep(10 * time.Millisecond)
				return req, nil
			case "EVIL":
				req.Host = "evil.com"
				return req, nil
			}
			req.Header.Set("X-Go", "1")
			return req, nil
		},
		OnResponse: func(ctx context.Context, resp *Response, req *Request) (*Response, error) {
			if req.Method == "BLOCK" {
				return nil, nil
			}
			resp.Header.Set("X-Go", "1")
			return resp, nil
		},
		HookTimeout: 50 * time.Millisecond,
	})
	out, err := p.FilterRequest(context.Background(), testRequest())
	if err != nil || out.Header.Get("X-Go") != "1" || out.Header.Get("X-Script") != "1" {
		t.Fatalf("%+v, %v", out, err)
	}
	if fmt.Sprint(order) != "[script go]" {
		t.Errorf("order %v", order)
	}
	for method, check := range map[string]func(error) bool{
		"BLOCK": func(err error) bool { return errors.Is(err, ErrHookBlocked) },
		"ERR": func(err error) bool {
			return ReasonOf(err) == ReasonPolicyError && strings.Contains(err.Error(), "hook says no")
		},
		"PANIC": func(err error) bool {
			return ReasonOf(err) == ReasonPolicyError && strings.Contains(err.Error(), "panicked")
		},
		"SLOW": func(err error) bool {
			return ReasonOf(err) == ReasonPolicyError && strings.Contains(err.Error(), "did not return")
		},
		"EVIL": func(err error) bool {
			return ReasonOf(err) == ReasonPolicyError && strings.Contains(err.Error(), "host")
		},
	} {
		r := testRequest()
		r.Method = method
		if _, err := p.FilterRequest(context.Background(), r); !check(err) {
			t.Errorf("%s: %v", method, err)
		}
	}
	resp, err := p.FilterResponse(context.Background(), &Response{StatusCode: 200, Header: http.Header{}}, testRequest())
	if err != nil || resp.Header.Get("X-Go") != "1" {
		t.Errorf("OnResponse: %+v, %v", resp, err)
	}
	r := testRequest()
	r.Method = "BLOCK"
	if _, err := p.FilterResponse(context.Background(), &Response{StatusCode: 200, Header: http.Header{}}, r); !errors.Is(err, ErrHookBlocked) {
		t.Errorf("OnResponse block: %v", err)
	}
}

func TestNoHooks(t *testing.T) {
	p := newPolicy(t, Config{AllowedHosts: []string{"*"}, PolicyScript: "def is_host_allowed(h):\n    return True\n"}, Options{})
	if p.HasRequestHooks() || p.HasResponseHooks() {
		t.Error("hooks reported without any")
	}
	req := testRequest()
	if out, err := p.FilterRequest(context.Background(), req); err != nil || out != req {
		t.Errorf("FilterRequest without hooks: %v, %v", out, err)
	}
	resp := &Response{StatusCode: 200}
	if out, err := p.FilterResponse(context.Background(), resp, req); err != nil || out != resp {
		t.Errorf("FilterResponse without hooks: %v, %v", out, err)
	}
	if p.MaxHookBody() != DefaultMaxHookBody {
		t.Errorf("MaxHookBody = %d", p.MaxHookBody())
	}
}

func TestScriptConcurrent(t *testing.T) {
	p := newPolicy(t, Config{
		AllowedHosts: []string{"*"},
		PolicyScript: `
def is_host_allowed(host):
    return not host.startswith("x")

def on_request(req):
    req.headers["X-N"] = req.url
    return req

def on_response(resp, req):
    resp.body = req.url
    return resp
`,
	}, Options{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				r := testRequest()
				r.URL = fmt.Sprintf("https://api.example.com/%d/%d", g, i)
				out, err := p.FilterRequest(context.Background(), r)
				if err != nil || out.Header.Get("X-N") != r.URL {
					t.Errorf("%v, %v", out, err)
					return
				}
				resp, err := p.FilterResponse(context.Background(), &Response{StatusCode: 200, Header: http.Header{}}, r)
				if err != nil || string(resp.Body) != r.URL {
					t.Errorf("%v, %v", resp, err)
					return
				}
				if p.HostAllowed(fmt.Sprintf("x%d.example.com", i)) || !p.HostAllowed(fmt.Sprintf("h%d.example.com", i)) {
					t.Error("is_host_allowed")
					return
				}
			}
		}()
	}
	wg.Wait()
}
