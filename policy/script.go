package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// scriptFile is the file name that positions in the policy script's
// errors carry: "policy_script:3:7: ...".
const scriptFile = "policy_script"

// Script hooks and their arity.
const (
	fnIsHostAllowed = "is_host_allowed"
	fnOnRequest     = "on_request"
	fnOnResponse    = "on_response"
	fnOnFile        = "on_file"
)

// scriptOptions are the language options: while loops and top-level
// control flow are allowed (the step bound stops any loop), recursion is
// not.
var scriptOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true}

// ScriptError is a fault of the policy script: a syntax error at New, an
// error at run time, a step or time limit, or a hook result of the wrong
// type. Line and Col locate it in the script when known (1-based; 0 when
// not).
type ScriptError struct {
	// Func is the hook that failed, or "" for the script's top level.
	Func string
	Line int
	Col  int
	Msg  string
}

func (e *ScriptError) Error() string {
	var b strings.Builder
	b.WriteString(scriptFile)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	b.WriteString(": ")
	if e.Func != "" {
		b.WriteString("in " + e.Func + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func scriptErrorAt(fn string, pos syntax.Position, format string, args ...any) *ScriptError {
	return &ScriptError{Func: fn, Line: int(pos.Line), Col: int(pos.Col), Msg: fmt.Sprintf(format, args...)}
}

// scriptSource is a compiled script, before its top level has run.
type scriptSource struct {
	prog        *starlark.Program
	predeclared starlark.StringDict
}

// compileScript parses src, rewrites it so that what it allocates is
// charged to each call's budget (scriptrewrite.go), and compiles it.
func compileScript(src string) (*scriptSource, error) {
	f, err := scriptOptions.Parse(scriptFile, src, 0)
	if err != nil {
		return nil, compileError(err)
	}
	if err := rewriteScript(f); err != nil {
		return nil, err
	}
	predeclared := scriptPredeclared()
	prog, err := starlark.FileProgram(f, predeclared.Has)
	if err != nil {
		return nil, compileError(err)
	}
	if prog.NumLoads() > 0 {
		module, pos := prog.Load(0)
		return nil, scriptErrorAt("", pos, "load(%q): a policy script is a single file and cannot load modules", module)
	}
	return &scriptSource{prog: prog, predeclared: predeclared}, nil
}

func compileError(err error) error {
	var se syntax.Error
	if errors.As(err, &se) {
		e := scriptErrorAt("", se.Pos, "syntax error: %s", se.Msg)
		if strings.HasPrefix(se.Msg, "got newline") && e.Col == 1 && e.Line > 1 {
			// The scanner places a missing ':' at the start of the next
			// line; the fault is at the end of this one.
			e.Line, e.Col = e.Line-1, 0
			e.Msg += " at the end of the line"
		}
		return e
	}
	var rl resolve.ErrorList
	if errors.As(err, &rl) && len(rl) > 0 {
		e := scriptErrorAt("", rl[0].Pos, "%s", rl[0].Msg)
		if len(rl) > 1 {
			e.Msg += fmt.Sprintf(" (and %d more errors)", len(rl)-1)
		}
		return e
	}
	return &ScriptError{Msg: err.Error()}
}

// script is a policy script whose top level has run: its globals are
// frozen, so its hooks may run on many goroutines at once.
type script struct {
	isHostAllowed, onRequest, onResponse, onFile *starlark.Function
	limits                                       scriptLimits
	print                                        func(string)
}

// scriptLimits bound each call into a policy script.
type scriptLimits struct {
	maxSteps uint64
	timeout  time.Duration
	maxAlloc int64
	// calls bounds the calls of this policy's script running at once,
	// shared those of every policy in the process (or those that share
	// it).
	calls, shared *ScriptGate
}

func (src *scriptSource) load(limits scriptLimits, print func(string)) (*script, error) {
	s := &script{limits: limits, print: print}
	var globals starlark.StringDict
	err := s.run(context.Background(), "", func(th *starlark.Thread) error {
		var err error
		globals, err = src.prog.Init(th, src.predeclared)
		return err
	})
	if err != nil {
		return nil, err
	}
	globals.Freeze()
	hooks := []struct {
		name  string
		arity int
		dst   **starlark.Function
		args  string
	}{
		{fnIsHostAllowed, 1, &s.isHostAllowed, "(host)"},
		{fnOnRequest, 1, &s.onRequest, "(req)"},
		{fnOnResponse, 2, &s.onResponse, "(resp, req)"},
		{fnOnFile, 3, &s.onFile, "(op, path, size)"},
	}
	for _, h := range hooks {
		v, ok := globals[h.name]
		if !ok {
			continue
		}
		f, ok := v.(*starlark.Function)
		if !ok {
			return nil, &ScriptError{Msg: fmt.Sprintf("%s is a %s: define it as def %s%s", h.name, v.Type(), h.name, h.args)}
		}
		if f.NumParams() != h.arity || f.NumKwonlyParams() > 0 {
			return nil, scriptErrorAt("", f.Position(), "%s takes %d parameters: define it as def %s%s", h.name, f.NumParams(), h.name, h.args)
		}
		*h.dst = f
	}
	if s.isHostAllowed == nil && s.onRequest == nil && s.onResponse == nil && s.onFile == nil {
		if f, ok := globals["is_allowed"].(*starlark.Function); ok {
			return nil, scriptErrorAt("", f.Position(), "is_allowed is not a hook: did you mean is_host_allowed(host)?")
		}
		return nil, &ScriptError{Msg: "the script defines none of is_host_allowed(host), on_request(req), on_response(resp, req) and on_file(op, path, size)"}
	}
	return s, nil
}

// maxPrint bounds what one print() of the script hands to
// Options.ScriptPrint.
const maxPrint = 4 << 10

// run runs f on a new thread bounded in steps, time and allocation (and
// by ctx), once a slot among the calls that may run at once is free,
// and turns any failure, panics included, into a *ScriptError.
func (s *script) run(ctx context.Context, fn string, f func(*starlark.Thread) error) (err error) {
	release, err := s.enter(ctx)
	if err != nil {
		return &ScriptError{Func: fn, Msg: err.Error()}
	}
	defer release()
	lim := &s.limits
	th := &starlark.Thread{
		Name: scriptFile,
		Load: func(*starlark.Thread, string) (starlark.StringDict, error) {
			return nil, errors.New("load is not available")
		},
		Print: func(_ *starlark.Thread, msg string) {
			if s.print != nil {
				if len(msg) > maxPrint {
					msg = fmt.Sprintf("%s... (%d bytes in all)", msg[:maxPrint], len(msg))
				}
				s.print(msg)
			}
		},
	}
	th.SetLocal(budgetKey, &allocBudget{limit: lim.maxAlloc})
	th.SetMaxExecutionSteps(lim.maxSteps)
	th.OnMaxSteps = func(th *starlark.Thread) {
		th.Cancel(fmt.Sprintf("ran for more than %d steps", lim.maxSteps))
	}
	timer := time.AfterFunc(lim.timeout, func() {
		th.Cancel(fmt.Sprintf("ran for longer than %v", lim.timeout))
	})
	defer timer.Stop()
	stop := context.AfterFunc(ctx, func() { th.Cancel(ctx.Err().Error()) })
	defer stop()
	defer func() {
		if r := recover(); r != nil {
			err = &ScriptError{Func: fn, Msg: fmt.Sprintf("internal error: %v", r)}
		}
	}()
	if err := f(th); err != nil {
		return runError(fn, err)
	}
	return nil
}

// runError locates a run-time error at the innermost frame of the
// script's own code.
func runError(fn string, err error) error {
	var se *ScriptError
	if errors.As(err, &se) {
		return se
	}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		for i := len(ee.CallStack) - 1; i >= 0; i-- {
			if pos := ee.CallStack[i].Pos; pos.Filename() == scriptFile {
				return scriptErrorAt(fn, pos, "%s", ee.Msg)
			}
		}
		return &ScriptError{Func: fn, Msg: ee.Msg}
	}
	return &ScriptError{Func: fn, Msg: err.Error()}
}

// hostAllowed runs is_host_allowed(host), which must return a bool.
func (s *script) hostAllowed(host string) (bool, error) {
	var allowed bool
	err := s.run(context.Background(), fnIsHostAllowed, func(th *starlark.Thread) error {
		v, err := starlark.Call(th, s.isHostAllowed, starlark.Tuple{starlark.String(host)}, nil)
		if err != nil {
			return err
		}
		b, ok := v.(starlark.Bool)
		if !ok {
			return scriptErrorAt(fnIsHostAllowed, s.isHostAllowed.Position(), "returned %s, want True or False", v.Type())
		}
		allowed = bool(b)
		return nil
	})
	return allowed, err
}

// request runs on_request(req). It returns nil when the script blocks
// the request by returning None.
func (s *script) request(ctx context.Context, req *Request) (*Request, error) {
	var out *Request
	err := s.run(ctx, fnOnRequest, func(th *starlark.Thread) error {
		obj := newRequestObject(req)
		v, err := starlark.Call(th, s.onRequest, starlark.Tuple{obj}, nil)
		if err != nil {
			return err
		}
		if v == starlark.None {
			return nil
		}
		got, ok := v.(*hookObject)
		if !ok || got.kind != kindRequest {
			return scriptErrorAt(fnOnRequest, s.onRequest.Position(), "returned %s, want the request or None", v.Type())
		}
		out, err = got.toRequest(req.Host)
		if err != nil {
			return scriptErrorAt(fnOnRequest, s.onRequest.Position(), "%v", err)
		}
		return nil
	})
	return out, err
}

// response runs on_response(resp, req), req being read-only. It returns
// nil when the script blocks the response by returning None.
func (s *script) response(ctx context.Context, resp *Response, req *Request) (*Response, error) {
	var out *Response
	err := s.run(ctx, fnOnResponse, func(th *starlark.Thread) error {
		r := newRequestObject(req)
		r.Freeze()
		v, err := starlark.Call(th, s.onResponse, starlark.Tuple{newResponseObject(resp), r}, nil)
		if err != nil {
			return err
		}
		if v == starlark.None {
			return nil
		}
		got, ok := v.(*hookObject)
		if !ok || got.kind != kindResponse {
			return scriptErrorAt(fnOnResponse, s.onResponse.Position(), "returned %s, want the response or None", v.Type())
		}
		out, err = got.toResponse()
		if err != nil {
			return scriptErrorAt(fnOnResponse, s.onResponse.Position(), "%v", err)
		}
		return nil
	})
	return out, err
}

const (
	kindRequest  = "request"
	kindResponse = "response"
)

// hookObject is the Starlark value of a request or a response: a record
// whose fields are read and set as attributes (req.headers) or as keys
// (req["headers"]).
type hookObject struct {
	kind     string
	names    []string // sorted
	vals     map[string]starlark.Value
	readOnly map[string]bool
	frozen   bool
}

var (
	_ starlark.HasSetField = (*hookObject)(nil)
	_ starlark.HasSetKey   = (*hookObject)(nil)
)

func newHookObject(kind string, vals map[string]starlark.Value, readOnly ...string) *hookObject {
	o := &hookObject{kind: kind, vals: vals, readOnly: map[string]bool{}}
	for k := range vals {
		o.names = append(o.names, k)
	}
	sort.Strings(o.names)
	for _, k := range readOnly {
		o.readOnly[k] = true
	}
	return o
}

func newRequestObject(r *Request) *hookObject {
	return newHookObject(kindRequest, map[string]starlark.Value{
		"method":  starlark.String(r.Method),
		"url":     starlark.String(r.URL),
		"host":    starlark.String(r.Host),
		"headers": headersValue(r.Header),
		"body":    bodyValue(r.Body),
	}, "host")
}

func newResponseObject(r *Response) *hookObject {
	return newHookObject(kindResponse, map[string]starlark.Value{
		"status_code": starlark.MakeInt(r.StatusCode),
		"headers":     headersValue(r.Header),
		"body":        bodyValue(r.Body),
	})
}

func headersValue(h http.Header) *starlark.Dict {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	d := starlark.NewDict(len(keys))
	for _, k := range keys {
		vs := make([]starlark.Value, len(h[k]))
		for i, v := range h[k] {
			vs[i] = starlark.String(v)
		}
		_ = d.SetKey(starlark.String(http.CanonicalHeaderKey(k)), starlark.NewList(vs))
	}
	return d
}

func bodyValue(b []byte) starlark.Value {
	if b == nil {
		return starlark.None
	}
	return starlark.String(b)
}

func (o *hookObject) String() string {
	if o.kind == kindRequest {
		return fmt.Sprintf("<request %s %s>", o.vals["method"], o.vals["url"])
	}
	return fmt.Sprintf("<response %s>", o.vals["status_code"])
}

func (o *hookObject) Type() string         { return o.kind }
func (o *hookObject) Truth() starlark.Bool { return true }
func (o *hookObject) Hash() (uint32, error) {
	return 0, fmt.Errorf("unhashable type: %s", o.kind)
}

func (o *hookObject) Freeze() {
	if o.frozen {
		return
	}
	o.frozen = true
	for _, v := range o.vals {
		v.Freeze()
	}
}

func (o *hookObject) Attr(name string) (starlark.Value, error) {
	return o.vals[name], nil // nil, nil when absent
}

func (o *hookObject) AttrNames() []string { return o.names }

func (o *hookObject) SetField(name string, v starlark.Value) error {
	if _, ok := o.vals[name]; !ok {
		return starlark.NoSuchAttrError(fmt.Sprintf("%s has no field %q (its fields are %s)", o.kind, name, strings.Join(o.names, ", ")))
	}
	if o.frozen {
		return fmt.Errorf("cannot set %s.%s: the %s is read-only here", o.kind, name, o.kind)
	}
	if o.readOnly[name] {
		return fmt.Errorf("cannot set %s.%s: it is read-only", o.kind, name)
	}
	if err := checkField(name, v); err != nil {
		return err
	}
	o.vals[name] = v
	return nil
}

func (o *hookObject) Get(k starlark.Value) (starlark.Value, bool, error) {
	s, ok := k.(starlark.String)
	if !ok {
		return nil, false, fmt.Errorf("%s keys are strings, not %s", o.kind, k.Type())
	}
	v, found := o.vals[string(s)]
	return v, found, nil
}

func (o *hookObject) SetKey(k, v starlark.Value) error {
	s, ok := k.(starlark.String)
	if !ok {
		return fmt.Errorf("%s keys are strings, not %s", o.kind, k.Type())
	}
	return o.SetField(string(s), v)
}

// checkField checks the type of a value set on a field.
func checkField(name string, v starlark.Value) error {
	switch name {
	case "method", "url":
		if _, ok := v.(starlark.String); !ok {
			return fmt.Errorf("%s must be a string, not %s", name, v.Type())
		}
	case "headers":
		if _, ok := v.(*starlark.Dict); !ok {
			return fmt.Errorf("headers must be a dict of header name to a string or a list of strings, not %s", v.Type())
		}
	case "body":
		switch v.(type) {
		case starlark.String, starlark.Bytes, starlark.NoneType:
		default:
			return fmt.Errorf("body must be a string, bytes or None, not %s", v.Type())
		}
	case "status_code":
		if _, ok := v.(starlark.Int); !ok {
			return fmt.Errorf("status_code must be an int, not %s", v.Type())
		}
	}
	return nil
}

func (o *hookObject) toRequest(host string) (*Request, error) {
	h, err := headersFrom(o.vals["headers"])
	if err != nil {
		return nil, err
	}
	body, err := bodyFrom(o.vals["body"])
	if err != nil {
		return nil, err
	}
	method, _ := starlark.AsString(o.vals["method"])
	u, _ := starlark.AsString(o.vals["url"])
	return &Request{Method: method, URL: u, Host: host, Header: h, Body: body}, nil
}

func (o *hookObject) toResponse() (*Response, error) {
	h, err := headersFrom(o.vals["headers"])
	if err != nil {
		return nil, err
	}
	body, err := bodyFrom(o.vals["body"])
	if err != nil {
		return nil, err
	}
	var code int
	if err := starlark.AsInt(o.vals["status_code"], &code); err != nil {
		return nil, fmt.Errorf("status_code: %v", err)
	}
	return &Response{StatusCode: code, Header: h, Body: body}, nil
}

// headersFrom converts the headers dict back, canonicalising names; the
// values of names equal once canonical are concatenated.
func headersFrom(v starlark.Value) (http.Header, error) {
	d, ok := v.(*starlark.Dict)
	if !ok {
		return nil, fmt.Errorf("headers must be a dict, not %s", v.Type())
	}
	h := http.Header{}
	for _, item := range d.Items() {
		k, ok := item[0].(starlark.String)
		if !ok {
			return nil, fmt.Errorf("header names are strings, not %s", item[0].Type())
		}
		name := http.CanonicalHeaderKey(string(k))
		switch val := item[1].(type) {
		case starlark.String:
			h[name] = append(h[name], string(val))
		case starlark.Indexable: // list or tuple
			for i := 0; i < val.Len(); i++ {
				s, ok := val.Index(i).(starlark.String)
				if !ok {
					return nil, fmt.Errorf("header %s: values are strings, not %s", name, val.Index(i).Type())
				}
				h[name] = append(h[name], string(s))
			}
		default:
			return nil, fmt.Errorf("header %s: want a string or a list of strings, not %s", name, item[1].Type())
		}
	}
	return h, nil
}

func bodyFrom(v starlark.Value) ([]byte, error) {
	switch b := v.(type) {
	case starlark.NoneType:
		return nil, nil
	case starlark.String:
		return []byte(b), nil
	case starlark.Bytes:
		return []byte(b), nil
	}
	return nil, fmt.Errorf("body must be a string, bytes or None, not %s", v.Type())
}
