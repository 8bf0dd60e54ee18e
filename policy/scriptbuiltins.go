package policy

import (
	"fmt"
	"strings"
	"unicode"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// cost says what a call of a built-in may allocate, before it runs.
// pre charges the budget and may hand back the arguments with an
// iterable of unknown length made into a tuple (see known); post charges
// the result's shallow size after the call, for built-ins whose result
// is bounded by values already charged. A built-in with neither
// allocates a bounded amount.
type cost struct {
	pre  func(b *allocBudget, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error)
	post bool
}

var free = cost{}

// universeCosts covers every built-in function of the universe; one
// that is missing (a newer version of the interpreter) is refused.
var universeCosts = map[string]cost{
	"abs": {post: true}, "any": free, "all": free, "bool": free, "chr": free, "float": free,
	"hash": free, "hasattr": free, "len": free, "max": free, "min": free, "ord": free,
	"range": free, "type": free,
	"bytes": {pre: func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		return chargeArg0(b, args, 1)
	}},
	"dict": {pre: func(b *allocBudget, _ starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error) {
		if err := b.charge(costTable + elemsCost(int64(len(kwargs)), costEntry)); err != nil {
			return nil, err
		}
		return chargeArg0(b, args, costEntry)
	}},
	"dir":       {post: true},
	"enumerate": {pre: perElement(costSlot + costHeader + 2*costSlot)},
	"fail":      {pre: chargeText},
	"int": {pre: func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		if len(args) > 0 {
			if s, ok := args[0].(starlark.String); ok && len(s) > maxIntDigits {
				return nil, fmt.Errorf("int: a string of more than %d characters cannot be parsed in a policy script", maxIntDigits)
			}
		}
		return args, nil
	}, post: true},
	"list":     {pre: perElement(costSlot)},
	"print":    {pre: chargeText},
	"repr":     {pre: chargeRepr(true)},
	"reversed": {pre: perElement(costSlot)},
	"set": {pre: func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		if err := b.charge(costTable); err != nil {
			return nil, err
		}
		return chargeArg0(b, args, costEntry)
	}},
	"sorted": {pre: func(b *allocBudget, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error) {
		per := int64(costSlot)
		for _, kv := range kwargs {
			if kv[0] == starlark.String("key") {
				per *= 2 // the keys are kept beside the elements
			}
		}
		return perElement(per)(b, recv, args, kwargs)
	}},
	"str":   {pre: chargeRepr(false)},
	"tuple": {pre: perElement(costSlot)},
	"zip": {pre: func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		args = append(starlark.Tuple(nil), args...)
		n := int64(-1)
		for i, a := range args {
			k, err := known(b, a)
			if err != nil {
				return nil, err
			}
			args[i] = k
			if l := length(k); n < 0 || l < n {
				n = l
			}
		}
		return args, b.charge(elemsCost(n, costSlot+costHeader+mul(int64(len(args)), costSlot)))
	}},
	// getattr is wrapped by itself (scriptGetattr).
	"getattr": free,
}

// methodCosts covers every method of the built-in types, by the
// receiver's type; one that is missing is refused.
var methodCosts = map[string]map[string]cost{
	"string": {
		"count": free, "endswith": free, "find": free, "index": free, "isalnum": free,
		"isalpha": free, "isdigit": free, "islower": free, "isspace": free, "istitle": free,
		"isupper": free, "rfind": free, "rindex": free, "startswith": free,
		// Lazy iterables and substrings, which share the string's bytes.
		"elems": free, "codepoints": free, "elem_ords": free, "codepoint_ords": free,
		"strip": free, "lstrip": free, "rstrip": free, "removeprefix": free, "removesuffix": free,
		"partition": {post: true}, "rpartition": {post: true},
		// Case changes may grow a UTF-8 string by half.
		"capitalize": {pre: chargeRecv(2)}, "lower": {pre: chargeRecv(2)},
		"upper": {pre: chargeRecv(2)}, "title": {pre: chargeRecv(2)},
		"format":     {pre: chargeFormat},
		"join":       {pre: chargeJoin},
		"replace":    {pre: chargeReplace},
		"split":      {pre: chargeSplit},
		"rsplit":     {pre: chargeSplit},
		"splitlines": {pre: chargeSplitlines},
	},
	"bytes": {"elems": free},
	"list": {
		"append": {pre: chargeFixed(costSlot)}, "insert": {pre: chargeFixed(costSlot)},
		"extend": {pre: perElement(costSlot)},
		"clear":  free, "index": free, "pop": free, "remove": free,
	},
	"dict": {
		"clear": free, "get": free, "pop": free, "popitem": free,
		"items":      {pre: recvElements(costSlot + costHeader + 2*costSlot)},
		"keys":       {pre: recvElements(costSlot)},
		"values":     {pre: recvElements(costSlot)},
		"setdefault": {pre: chargeFixed(costEntry)},
		"update": {pre: func(b *allocBudget, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error) {
			if err := b.charge(elemsCost(int64(len(kwargs)), costEntry)); err != nil {
				return nil, err
			}
			return chargeArg0(b, args, costEntry)
		}},
	},
	"set": {
		"clear": free, "discard": free, "pop": free, "remove": free,
		"add":                  {pre: chargeFixed(costEntry)},
		"update":               {pre: allElements(costEntry, false)},
		"issubset":             {pre: allElements(costEntry, false)},
		"issuperset":           {pre: allElements(costEntry, false)},
		"union":                {pre: allElements(costEntry, true)},
		"difference":           {pre: allElements(costEntry, true)},
		"intersection":         {pre: allElements(costEntry, true)},
		"symmetric_difference": {pre: allElements(costEntry, true)},
	},
}

// scriptPredeclared returns what every policy script sees besides the
// universe's constants: the built-ins the rewrite calls, and a wrapper
// of each universe built-in that charges the budget.
func scriptPredeclared() starlark.StringDict {
	d := starlark.StringDict{
		rwBinop: starlark.NewBuiltin(rwBinop, scriptBinop),
		rwGrow:  starlark.NewBuiltin(rwGrow, scriptGrow),
		rwCharge: starlark.NewBuiltin(rwCharge, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return args[0], budgetOf(th).charge(sizeOf(args[0]))
		}),
		rwElem: starlark.NewBuiltin(rwElem, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return args[0], budgetOf(th).charge(costSlot)
		}),
		rwEntry: starlark.NewBuiltin(rwEntry, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return args[0], budgetOf(th).charge(costEntry)
		}),
		rwAttr: starlark.NewBuiltin(rwAttr, func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return scriptAttr(args[0], string(args[1].(starlark.String)))
		}),
	}
	for name, v := range starlark.Universe {
		orig, ok := v.(*starlark.Builtin)
		if !ok {
			continue // None, True, False
		}
		c, ok := universeCosts[name]
		switch {
		case name == "getattr":
			d[name] = starlark.NewBuiltin(name, func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
				v, err := orig.CallInternal(th, args, kwargs)
				if err != nil {
					return nil, err
				}
				return wrapMethod(v)
			})
		case ok:
			d[name] = wrapBuiltin(orig, c, nil)
		default:
			d[name] = unavailable(name)
		}
	}
	return d
}

func unavailable(name string) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return nil, fmt.Errorf("%s is not available in policy scripts: airlock cannot bound what it allocates", name)
	})
}

// wrapBuiltin returns orig, charging c around each call.
func wrapBuiltin(orig *starlark.Builtin, c cost, recv starlark.Value) *starlark.Builtin {
	w := starlark.NewBuiltin(orig.Name(), func(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		b := budgetOf(th)
		if c.pre != nil {
			var err error
			if args, err = c.pre(b, recv, args, kwargs); err != nil {
				return nil, fmt.Errorf("%s: %w", orig.Name(), err)
			}
		}
		v, err := orig.CallInternal(th, args, kwargs)
		if err != nil {
			return nil, err
		}
		if c.post {
			if err := b.charge(sizeOf(v)); err != nil {
				return nil, fmt.Errorf("%s: %w", orig.Name(), err)
			}
		}
		return v, nil
	})
	if recv != nil {
		return w.BindReceiver(recv)
	}
	return w
}

// scriptAttr is x.name, with the methods of built-in types wrapped.
func scriptAttr(x starlark.Value, name string) (starlark.Value, error) {
	ha, ok := x.(starlark.HasAttrs)
	if !ok {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	v, err := ha.Attr(name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	return wrapMethod(v)
}

// wrapMethod wraps v when it is a method of a built-in type.
func wrapMethod(v starlark.Value) (starlark.Value, error) {
	m, ok := v.(*starlark.Builtin)
	if !ok || m.Receiver() == nil {
		return v, nil
	}
	recv := m.Receiver()
	c, ok := methodCosts[recv.Type()][m.Name()]
	if !ok {
		return unavailable(recv.Type() + "." + m.Name()), nil
	}
	return wrapBuiltin(m, c, recv), nil
}

// Costs of the built-ins.

func chargeFixed(n int64) func(*allocBudget, starlark.Value, starlark.Tuple, []starlark.Tuple) (starlark.Tuple, error) {
	return func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		return args, b.charge(n)
	}
}

// chargeArg0 charges per for each element of the first argument, if
// any.
func chargeArg0(b *allocBudget, args starlark.Tuple, per int64) (starlark.Tuple, error) {
	if len(args) == 0 {
		return args, nil
	}
	if s, ok := args[0].(starlark.String); ok {
		return args, b.charge(costHeader + mul(int64(len(s)), per))
	}
	k, err := known(b, args[0])
	if err != nil {
		return nil, err
	}
	args = append(starlark.Tuple{k}, args[1:]...)
	return args, b.charge(costObject + elemsCost(length(k), per))
}

func perElement(per int64) func(*allocBudget, starlark.Value, starlark.Tuple, []starlark.Tuple) (starlark.Tuple, error) {
	return func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		return chargeArg0(b, args, per)
	}
}

// recvElements charges per for each element of the receiver.
func recvElements(per int64) func(*allocBudget, starlark.Value, starlark.Tuple, []starlark.Tuple) (starlark.Tuple, error) {
	return func(b *allocBudget, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		return args, b.charge(costObject + elemsCost(length(recv), per))
	}
}

// allElements charges per for each element of every argument, and of
// the receiver too when the method makes a new set.
func allElements(per int64, copyRecv bool) func(*allocBudget, starlark.Value, starlark.Tuple, []starlark.Tuple) (starlark.Tuple, error) {
	return func(b *allocBudget, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		n := int64(0)
		if copyRecv {
			n = length(recv)
		}
		args = append(starlark.Tuple(nil), args...)
		for i, a := range args {
			k, err := known(b, a)
			if err != nil {
				return nil, err
			}
			args[i] = k
			n = add(n, max(length(k), 0))
		}
		return args, b.charge(costTable + elemsCost(n, per))
	}
}

func chargeRecv(factor int64) func(*allocBudget, starlark.Value, starlark.Tuple, []starlark.Tuple) (starlark.Tuple, error) {
	return func(b *allocBudget, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		return args, b.charge(costHeader + mul(length(recv), factor))
	}
}

// textSize bounds the text of v (as str, or repr when quoted) by what
// the budget still holds: past it, the charge fails.
func textSize(b *allocBudget, v starlark.Value, quoted bool) (int64, error) {
	return reprSize(v, quoted, b.limit-b.used)
}

func chargeRepr(quoted bool) func(*allocBudget, starlark.Value, starlark.Tuple, []starlark.Tuple) (starlark.Tuple, error) {
	return func(b *allocBudget, _ starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
		if len(args) == 0 {
			return args, nil
		}
		n, err := textSize(b, args[0], quoted)
		if err != nil {
			return nil, err
		}
		return args, b.charge(costHeader + n)
	}
}

// chargeText charges the message of print and fail: the text of every
// argument (and sep).
func chargeText(b *allocBudget, _ starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error) {
	total := int64(costHeader)
	for _, a := range args {
		n, err := textSize(b, a, false)
		if err != nil {
			return nil, err
		}
		total = add(total, n+1)
	}
	for _, kv := range kwargs {
		n, err := textSize(b, kv[1], false)
		if err != nil {
			return nil, err
		}
		total = add(total, mul(n, int64(len(args))+1))
	}
	return args, b.charge(total)
}

// chargeFormat bounds fmt.format(...): each replacement field may be
// the longest text of any argument.
func chargeFormat(b *allocBudget, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error) {
	f := string(recv.(starlark.String))
	var longest int64
	vals := append(starlark.Tuple(nil), args...)
	for _, kv := range kwargs {
		vals = append(vals, kv[1])
	}
	for _, v := range vals {
		n, err := textSize(b, v, true)
		if err != nil {
			return nil, err
		}
		longest = max(longest, n)
	}
	return args, b.charge(costHeader + add(int64(len(f)), mul(int64(strings.Count(f, "{")), longest)))
}

// formatCost bounds fmt % x in the same way.
func formatCost(b *allocBudget, f starlark.String, x starlark.Value) (int64, error) {
	n, err := textSize(b, x, true)
	if err != nil {
		return 0, err
	}
	return costHeader + add(int64(len(f)), mul(int64(strings.Count(string(f), "%")), n)), nil
}

// chargeJoin charges sep.join(iterable) exactly: the elements' lengths
// and a separator between each two.
func chargeJoin(b *allocBudget, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
	if len(args) != 1 {
		return args, nil // the builtin says what is wrong
	}
	k, err := known(b, args[0])
	if err != nil {
		return nil, err
	}
	it, ok := k.(starlark.Iterable)
	if !ok {
		return args, nil
	}
	sep := int64(len(recv.(starlark.String)))
	total := int64(costHeader)
	iter := it.Iterate()
	defer iter.Done()
	var x starlark.Value
	for n := 0; iter.Next(&x); n++ {
		if s, ok := x.(starlark.String); ok {
			total = add(total, int64(len(s)))
		}
		if n > 0 {
			total = add(total, sep)
		}
	}
	return starlark.Tuple{k}, b.charge(total)
}

func chargeReplace(b *allocBudget, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
	if len(args) < 2 {
		return args, nil
	}
	s := string(recv.(starlark.String))
	old, ok1 := args[0].(starlark.String)
	repl, ok2 := args[1].(starlark.String)
	if !ok1 || !ok2 || len(repl) <= len(old) {
		return args, b.charge(costHeader + int64(len(s)))
	}
	n := int64(strings.Count(s, string(old)))
	if len(args) > 2 {
		if c, ok := args[2].(starlark.Int); ok {
			if lim, ok := c.Int64(); ok && lim >= 0 && lim < n {
				n = lim
			}
		}
	}
	return args, b.charge(costHeader + add(int64(len(s)), mul(n, int64(len(repl)-len(old)))))
}

// chargeSplit charges a slot for each piece (a substring shares the
// string's bytes).
func chargeSplit(b *allocBudget, recv starlark.Value, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Tuple, error) {
	s := string(recv.(starlark.String))
	var sep starlark.Value = starlark.None
	if len(args) > 0 {
		sep = args[0]
	}
	for _, kv := range kwargs {
		if kv[0] == starlark.String("sep") {
			sep = kv[1]
		}
	}
	var n int64
	if sepStr, ok := sep.(starlark.String); ok && sepStr != "" {
		n = int64(strings.Count(s, string(sepStr))) + 1
	} else {
		n = int64(countFields(s))
	}
	return args, b.charge(costObject + mul(n, costSlot))
}

func countFields(s string) int {
	n, in := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
		} else if !in {
			in, n = true, n+1
		}
	}
	return n
}

func chargeSplitlines(b *allocBudget, recv starlark.Value, args starlark.Tuple, _ []starlark.Tuple) (starlark.Tuple, error) {
	s := string(recv.(starlark.String))
	n := int64(strings.Count(s, "\n")+strings.Count(s, "\r")) + 1
	return args, b.charge(costObject + mul(n, costSlot))
}

// Operators.

// binops maps the operators the rewrite passes to scriptBinop and
// scriptGrow back to their tokens.
var binops = map[string]syntax.Token{
	"+": syntax.PLUS, "-": syntax.MINUS, "*": syntax.STAR, "/": syntax.SLASH,
	"//": syntax.SLASHSLASH, "%": syntax.PERCENT, "&": syntax.AMP, "|": syntax.PIPE,
	"^": syntax.CIRCUMFLEX, "<<": syntax.LTLT, ">>": syntax.GTGT,
}

// scriptBinop is x op y, charged before it is made.
func scriptBinop(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	op := binops[string(args[0].(starlark.String))]
	x, y := args[1], args[2]
	b := budgetOf(th)
	n, err := binopCost(b, op, x, y, false)
	if err != nil {
		return nil, err
	}
	if err := b.charge(n); err != nil {
		return nil, err
	}
	return starlark.Binary(op, x, y)
}

// scriptGrow charges x op= y and returns y for the interpreter to
// apply (a tuple of y's elements when its length was not known).
func scriptGrow(th *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	op := binops[string(args[0].(starlark.String))]
	x, y := args[1], args[2]
	b := budgetOf(th)
	if _, ok := x.(*starlark.List); ok && op == syntax.PLUS {
		if _, ok := y.(starlark.Iterable); ok {
			// In place: x grows by y's elements.
			k, err := known(b, y)
			if err != nil {
				return nil, err
			}
			return k, b.charge(elemsCost(length(k), costSlot))
		}
	}
	n, err := binopCost(b, op, x, y, true)
	if err != nil {
		return nil, err
	}
	return y, b.charge(n)
}

// binopCost bounds what x op y makes. inplace is for x op= y, which
// updates a dict in place for |=.
func binopCost(b *allocBudget, op syntax.Token, x, y starlark.Value, inplace bool) (int64, error) {
	xi, xInt := x.(starlark.Int)
	yi, yInt := y.(starlark.Int)
	if xInt && yInt {
		bx, by := intBits(xi), intBits(yi)
		var n int64
		switch op {
		case syntax.STAR:
			n = bx + by
		case syntax.LTLT:
			s, ok := yi.Int64()
			if !ok || s < 0 || s >= 512 {
				return 0, nil // the interpreter refuses it
			}
			n = bx + s
		default:
			n = max(bx, by) + 1
		}
		if err := checkInt(n); err != nil {
			return 0, err
		}
		return costHeader + n/8, nil
	}
	switch op {
	case syntax.PLUS:
		lx, ly := length(x), length(y)
		switch x.(type) {
		case starlark.String, starlark.Bytes:
			return costHeader + add(lx, ly), nil
		case starlark.Tuple, *starlark.List:
			return 3*costHeader + elemsCost(add(lx, ly), costSlot), nil
		}
	case syntax.STAR:
		seq, count := x, y
		if xInt {
			seq, count = y, x
		}
		c, ok := count.(starlark.Int)
		if !ok {
			return costHeader, nil
		}
		n, ok := c.Int64()
		if !ok || n <= 0 {
			return costHeader, nil // the interpreter refuses it or makes nothing
		}
		switch seq.(type) {
		case starlark.String, starlark.Bytes:
			return costHeader + mul(length(seq), n), nil
		case starlark.Tuple, *starlark.List:
			return 3*costHeader + elemsCost(mul(length(seq), n), costSlot), nil
		}
	case syntax.PERCENT:
		if f, ok := x.(starlark.String); ok {
			return formatCost(b, f, y)
		}
	case syntax.PIPE, syntax.AMP, syntax.CIRCUMFLEX, syntax.MINUS:
		lx, ly := max(length(x), 0), max(length(y), 0)
		if d, ok := x.(*starlark.Dict); ok {
			if inplace && op == syntax.PIPE {
				if _, ok := y.(*starlark.Dict); ok {
					return elemsCost(ly, costEntry), nil
				}
			}
			lx = int64(d.Len())
		}
		if s, ok := x.(*starlark.Set); ok {
			lx = int64(s.Len())
		}
		if _, ok := x.(*starlark.Dict); ok {
			return costTable + elemsCost(add(lx, ly), costEntry), nil
		}
		if _, ok := x.(*starlark.Set); ok {
			return costTable + elemsCost(add(lx, ly), costEntry), nil
		}
	}
	return costHeader, nil
}
