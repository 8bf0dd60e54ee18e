package policy

import (
	"fmt"
	"strconv"
	"strings"

	"go.starlark.net/syntax"
)

// go.starlark.net bounds a call in steps but not in memory, and one step
// can allocate without bound ("x" * n, s + s, ",".join(l), a dict
// literal in a loop). It has no allocation hook, so the policy script is
// rewritten before it is compiled: every expression that makes a value
// whose size depends on data goes through a built-in of this package
// that charges the call's allocation budget (see scriptmem.go) before or
// as the value is made. What is left to the interpreter alone allocates
// a bounded amount that nothing retains (call frames, iterators).
//
// The rewrite keeps the script's semantics, its evaluation order and the
// positions of its errors:
//
//	x + y             ->  _airlock_binop("+", x, y)
//	-x, [..], {..}, (..), x[i:j], lambda
//	                  ->  _airlock_charge(...)
//	[e for ...]       ->  _airlock_charge([_airlock_elem(e) for ...])
//	{k: v for ...}    ->  _airlock_charge({_airlock_entry(k): v for ...})
//	x.name            ->  _airlock_attr(x, "name")    (methods are wrapped)
//	f(*a, **kw)       ->  f(*_airlock_charge(a), **_airlock_charge(kw))
//	a[k] = v          ->  a[_airlock_entry(k)] = v    (also in for targets)
//	x op= y           ->  x op= _airlock_grow("op", x, y)
//	a[k] op= y        ->  _airlock_tN = a; _airlock_tM = k
//	                      _airlock_tN[_airlock_tM] op= _airlock_grow("op", _airlock_tN[_airlock_tM], y)
//	a.f op= y         ->  _airlock_tN = a
//	                      _airlock_tN.f op= _airlock_grow("op", _airlock_attr(_airlock_tN, "f"), y)
//	def f(): ...      ->  def f(): ...; _airlock_charge(f)
//
// Builtins (len, str, ...) are predeclared wrappers of the universe's
// (scriptbuiltins.go).

// reservedPrefix starts the names the rewrite adds; a script may not use
// it.
const reservedPrefix = "_airlock_"

// Names of the predeclared built-ins that the rewrite calls.
const (
	rwBinop  = reservedPrefix + "binop"
	rwGrow   = reservedPrefix + "grow"
	rwCharge = reservedPrefix + "charge"
	rwElem   = reservedPrefix + "elem"
	rwEntry  = reservedPrefix + "entry"
	rwAttr   = reservedPrefix + "attr"
)

// rewriteScript rewrites f in place. It fails on a name that uses the
// reserved prefix.
func rewriteScript(f *syntax.File) error {
	var bad *syntax.Ident
	syntax.Walk(f, func(n syntax.Node) bool {
		if id, ok := n.(*syntax.Ident); ok && bad == nil && strings.HasPrefix(id.Name, reservedPrefix) {
			bad = id
		}
		return bad == nil
	})
	if bad != nil {
		return scriptErrorAt("", bad.NamePos, "the name %s is reserved: names starting with %s are airlock's", bad.Name, reservedPrefix)
	}
	rw := &scriptRewriter{}
	f.Stmts = rw.stmts(f.Stmts)
	return nil
}

type scriptRewriter struct {
	temps int
}

func (rw *scriptRewriter) temp(pos syntax.Position) *syntax.Ident {
	rw.temps++
	return ident(pos, reservedPrefix+"t"+strconv.Itoa(rw.temps))
}

func ident(pos syntax.Position, name string) *syntax.Ident {
	return &syntax.Ident{NamePos: pos, Name: name}
}

func strLit(pos syntax.Position, s string) *syntax.Literal {
	return &syntax.Literal{Token: syntax.STRING, TokenPos: pos, Raw: strconv.Quote(s), Value: s}
}

// call makes fn(args...) whose errors are reported at pos.
func call(pos syntax.Position, fn string, args ...syntax.Expr) *syntax.CallExpr {
	return &syntax.CallExpr{Fn: ident(pos, fn), Lparen: pos, Args: args, Rparen: pos}
}

func (rw *scriptRewriter) stmts(in []syntax.Stmt) []syntax.Stmt {
	out := make([]syntax.Stmt, 0, len(in))
	for _, s := range in {
		out = append(out, rw.stmt(s)...)
	}
	return out
}

func (rw *scriptRewriter) stmt(s syntax.Stmt) []syntax.Stmt {
	switch s := s.(type) {
	case *syntax.AssignStmt:
		if s.Op == syntax.EQ {
			s.RHS = rw.expr(s.RHS)
			s.LHS = rw.target(s.LHS)
			return []syntax.Stmt{s}
		}
		return rw.augmented(s)
	case *syntax.DefStmt:
		rw.params(s.Params)
		s.Body = rw.stmts(s.Body)
		// A def inside a function or loop makes a new closure each time.
		charge := &syntax.ExprStmt{X: call(s.Def, rwCharge, ident(s.Name.NamePos, s.Name.Name))}
		return []syntax.Stmt{s, charge}
	case *syntax.ExprStmt:
		s.X = rw.expr(s.X)
	case *syntax.ForStmt:
		s.X = rw.expr(s.X)
		s.Vars = rw.target(s.Vars)
		s.Body = rw.stmts(s.Body)
	case *syntax.WhileStmt:
		s.Cond = rw.expr(s.Cond)
		s.Body = rw.stmts(s.Body)
	case *syntax.IfStmt:
		s.Cond = rw.expr(s.Cond)
		s.True = rw.stmts(s.True)
		s.False = rw.stmts(s.False)
	case *syntax.ReturnStmt:
		if s.Result != nil {
			s.Result = rw.expr(s.Result)
		}
	case *syntax.BranchStmt, *syntax.LoadStmt:
	default:
		panic(fmt.Sprintf("policy script rewrite: unexpected statement %T", s))
	}
	return []syntax.Stmt{s}
}

// augmented rewrites x op= y so that the growth is charged before the
// interpreter applies the operator (in place for list += and dict |=,
// as it always does). A target with an index or a field is evaluated
// once, into temporaries, as the interpreter would.
func (rw *scriptRewriter) augmented(s *syntax.AssignStmt) []syntax.Stmt {
	op := strLit(s.OpPos, strings.TrimSuffix(s.Op.String(), "="))
	rhs := rw.expr(s.RHS)
	switch lhs := unparen(s.LHS).(type) {
	case *syntax.Ident:
		s.RHS = call(s.OpPos, rwGrow, op, ident(lhs.NamePos, lhs.Name), rhs)
		return []syntax.Stmt{s}
	case *syntax.IndexExpr:
		obj, key := rw.temp(lhs.Lbrack), rw.temp(lhs.Lbrack)
		pre := []syntax.Stmt{
			&syntax.AssignStmt{OpPos: lhs.Lbrack, Op: syntax.EQ, LHS: obj, RHS: rw.expr(lhs.X)},
			&syntax.AssignStmt{OpPos: lhs.Lbrack, Op: syntax.EQ, LHS: key, RHS: rw.expr(lhs.Y)},
		}
		cur := &syntax.IndexExpr{X: ident(obj.NamePos, obj.Name), Lbrack: lhs.Lbrack, Y: ident(key.NamePos, key.Name), Rbrack: lhs.Rbrack}
		s.LHS = &syntax.IndexExpr{X: ident(obj.NamePos, obj.Name), Lbrack: lhs.Lbrack, Y: ident(key.NamePos, key.Name), Rbrack: lhs.Rbrack}
		s.RHS = call(s.OpPos, rwGrow, op, cur, rhs)
		return append(pre, s)
	case *syntax.DotExpr:
		obj := rw.temp(lhs.Dot)
		pre := &syntax.AssignStmt{OpPos: lhs.Dot, Op: syntax.EQ, LHS: obj, RHS: rw.expr(lhs.X)}
		cur := call(lhs.Dot, rwAttr, ident(obj.NamePos, obj.Name), strLit(lhs.NamePos, lhs.Name.Name))
		s.LHS = &syntax.DotExpr{X: ident(obj.NamePos, obj.Name), Dot: lhs.Dot, NamePos: lhs.NamePos, Name: lhs.Name}
		s.RHS = call(s.OpPos, rwGrow, op, cur, rhs)
		return []syntax.Stmt{pre, s}
	default:
		// Not assignable: leave it for the resolver to refuse.
		s.RHS = rhs
		return []syntax.Stmt{s}
	}
}

func unparen(e syntax.Expr) syntax.Expr {
	for {
		p, ok := e.(*syntax.ParenExpr)
		if !ok {
			return e
		}
		e = p.X
	}
}

// target rewrites an assignment target: a[k] may add an entry to a.
func (rw *scriptRewriter) target(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.IndexExpr:
		e.X = rw.expr(e.X)
		e.Y = call(e.Lbrack, rwEntry, rw.expr(e.Y))
	case *syntax.DotExpr:
		e.X = rw.expr(e.X)
	case *syntax.TupleExpr:
		for i := range e.List {
			e.List[i] = rw.target(e.List[i])
		}
	case *syntax.ListExpr:
		for i := range e.List {
			e.List[i] = rw.target(e.List[i])
		}
	case *syntax.ParenExpr:
		e.X = rw.target(e.X)
	}
	return e
}

func (rw *scriptRewriter) params(ps []syntax.Expr) {
	for _, p := range ps {
		if b, ok := p.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
			b.Y = rw.expr(b.Y) // a default value
		}
	}
}

// arith are the binary operators that make a new value.
var arith = map[syntax.Token]bool{
	syntax.PLUS: true, syntax.MINUS: true, syntax.STAR: true, syntax.SLASH: true,
	syntax.SLASHSLASH: true, syntax.PERCENT: true, syntax.AMP: true, syntax.PIPE: true,
	syntax.CIRCUMFLEX: true, syntax.LTLT: true, syntax.GTGT: true,
}

func (rw *scriptRewriter) exprs(es []syntax.Expr) {
	for i := range es {
		es[i] = rw.expr(es[i])
	}
}

func (rw *scriptRewriter) expr(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.Ident, *syntax.Literal:
		return e
	case *syntax.ParenExpr:
		e.X = rw.expr(e.X)
		return e
	case *syntax.BinaryExpr:
		e.X, e.Y = rw.expr(e.X), rw.expr(e.Y)
		if !arith[e.Op] {
			return e // comparisons, in, and, or
		}
		return call(e.OpPos, rwBinop, strLit(e.OpPos, e.Op.String()), e.X, e.Y)
	case *syntax.UnaryExpr:
		e.X = rw.expr(e.X)
		if e.Op == syntax.NOT {
			return e
		}
		return call(e.OpPos, rwCharge, e)
	case *syntax.CondExpr:
		e.Cond, e.True, e.False = rw.expr(e.Cond), rw.expr(e.True), rw.expr(e.False)
		return e
	case *syntax.IndexExpr:
		e.X, e.Y = rw.expr(e.X), rw.expr(e.Y)
		return e
	case *syntax.SliceExpr:
		e.X = rw.expr(e.X)
		for _, p := range []*syntax.Expr{&e.Lo, &e.Hi, &e.Step} {
			if *p != nil {
				*p = rw.expr(*p)
			}
		}
		return call(e.Lbrack, rwCharge, e)
	case *syntax.DotExpr:
		return call(e.Dot, rwAttr, rw.expr(e.X), strLit(e.NamePos, e.Name.Name))
	case *syntax.CallExpr:
		e.Fn = rw.expr(e.Fn)
		for i, a := range e.Args {
			switch a := a.(type) {
			case *syntax.UnaryExpr:
				if a.Op == syntax.STAR || a.Op == syntax.STARSTAR {
					// *args, **kwargs: spread into a new tuple or dict.
					a.X = call(a.OpPos, rwCharge, rw.expr(a.X))
					continue
				}
				e.Args[i] = rw.expr(a)
			case *syntax.BinaryExpr: // name=value
				if a.Op == syntax.EQ {
					a.Y = rw.expr(a.Y)
					continue
				}
				e.Args[i] = rw.expr(a)
			default:
				e.Args[i] = rw.expr(a)
			}
		}
		return e
	case *syntax.ListExpr:
		rw.exprs(e.List)
		return call(e.Lbrack, rwCharge, e)
	case *syntax.TupleExpr:
		rw.exprs(e.List)
		if len(e.List) == 0 {
			return e
		}
		pos := e.Lparen
		if !pos.IsValid() {
			pos = syntax.Start(e.List[0])
		}
		return call(pos, rwCharge, e)
	case *syntax.DictExpr:
		for _, item := range e.List {
			entry := item.(*syntax.DictEntry)
			entry.Key, entry.Value = rw.expr(entry.Key), rw.expr(entry.Value)
		}
		return call(e.Lbrace, rwCharge, e)
	case *syntax.Comprehension:
		for _, c := range e.Clauses {
			switch c := c.(type) {
			case *syntax.ForClause:
				c.X = rw.expr(c.X)
				c.Vars = rw.target(c.Vars)
			case *syntax.IfClause:
				c.Cond = rw.expr(c.Cond)
			}
		}
		if entry, ok := e.Body.(*syntax.DictEntry); ok {
			entry.Key = call(e.Lbrack, rwEntry, rw.expr(entry.Key))
			entry.Value = rw.expr(entry.Value)
		} else {
			e.Body = call(e.Lbrack, rwElem, rw.expr(e.Body))
		}
		return call(e.Lbrack, rwCharge, e)
	case *syntax.LambdaExpr:
		rw.params(e.Params)
		e.Body = rw.expr(e.Body)
		return call(e.Lambda, rwCharge, e)
	case *syntax.DictEntry:
		panic("policy script rewrite: a dict entry outside a dict")
	}
	panic(fmt.Sprintf("policy script rewrite: unexpected expression %T", e))
}
