package policy

import (
	"fmt"
	"math"
	"math/bits"

	"go.starlark.net/starlark"
)

// Sizes, in bytes, that the allocation budget charges: upper bounds of
// what the interpreter allocates for each kind of value, slack
// included (a list's spare capacity, a hash table's empty slots).
const (
	costHeader = 16  // a value boxed in an interface, a string header
	costSlot   = 32  // one element of a list or tuple, its box included
	costEntry  = 128 // one entry of a dict or set, its share of the table included
	costObject = 256 // a function, a closure, anything else
	costTable  = 512 // an empty dict or set: its first bucket is inline

	// maxIntBytes bounds the size of an int: multiplying two larger ones
	// takes long enough, in one step, to defeat the time bound.
	maxIntBytes = 64 << 10
	// maxIntDigits bounds the string int() parses (its cost grows
	// faster than its length), as Python does.
	maxIntDigits = 4300
	// maxReprDepth bounds the nesting of a value turned into text.
	maxReprDepth = 100
)

// allocBudget is what one call into the policy script may still
// allocate. It lives in the call's thread, which runs on one goroutine.
type allocBudget struct {
	limit, used int64
}

const budgetKey = "airlock.alloc"

func budgetOf(th *starlark.Thread) *allocBudget {
	b, _ := th.Local(budgetKey).(*allocBudget)
	if b == nil {
		// Every thread of a policy script gets one (script.run): this is
		// a bug, and it fails closed.
		panic("policy script thread without an allocation budget")
	}
	return b
}

// AllocError is the error of a policy script call that would have
// allocated more than its bound.
type AllocError struct {
	Limit int64
}

func (e *AllocError) Error() string {
	return fmt.Sprintf("would allocate more than %s, the bound of one call into the policy script", formatBytes(e.Limit))
}

// charge takes n bytes from the budget, or fails without taking any.
func (b *allocBudget) charge(n int64) error {
	if n < 0 {
		n = math.MaxInt64
	}
	if n > b.limit-b.used {
		b.used = b.limit
		return &AllocError{Limit: b.limit}
	}
	b.used += n
	return nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// add and mul saturate at MaxInt64, which no budget holds.
func add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// sizeOf is the shallow size of a value: what making it allocated, not
// counting the values it refers to (each charged when it was made).
func sizeOf(v starlark.Value) int64 {
	switch v := v.(type) {
	case starlark.NoneType, starlark.Bool:
		return 0
	case starlark.String:
		return costHeader + int64(len(v))
	case starlark.Bytes:
		return costHeader + int64(len(v))
	case starlark.Int:
		return intSize(v)
	case starlark.Float:
		return costHeader
	case starlark.Tuple:
		return costHeader + mul(int64(len(v)), costSlot)
	case *starlark.List:
		return 3*costHeader + mul(int64(v.Len()), costSlot)
	case *starlark.Dict:
		return costTable + mul(int64(v.Len()), costEntry)
	case *starlark.Set:
		return costTable + mul(int64(v.Len()), costEntry)
	}
	return costObject
}

func intSize(i starlark.Int) int64 {
	if _, ok := i.Int64(); ok {
		return costHeader
	}
	return costHeader + int64(i.BigInt().BitLen()+7)/8
}

// intBits is the number of bits of |i|.
func intBits(i starlark.Int) int64 {
	if n, ok := i.Int64(); ok {
		if n < 0 {
			n = -n
		}
		return int64(bits.Len64(uint64(n)))
	}
	return int64(i.BigInt().BitLen())
}

// checkInt refuses an int result of bitLen bits past maxIntBytes.
func checkInt(bitLen int64) error {
	if bitLen > maxIntBytes*8 {
		return fmt.Errorf("an int of %d bits is larger than policy scripts allow (%d bits)", bitLen, maxIntBytes*8)
	}
	return nil
}

// length is the number of elements of an iterable, -1 when unknown.
func length(v starlark.Value) int64 {
	if n := starlark.Len(v); n >= 0 {
		return int64(n)
	}
	return -1
}

// elemsCost is what a sequence of n elements costs, each costing per;
// an iterable of unknown length is materialised first (see known).
func elemsCost(n, per int64) int64 { return mul(max(n, 0), per) }

// known returns v, or, when v is an iterable whose length is not known
// ahead (such as s.codepoints()), a tuple of its elements made under
// the budget, so that the caller can charge what is made from it.
func known(b *allocBudget, v starlark.Value) (starlark.Value, error) {
	if length(v) >= 0 {
		return v, nil
	}
	it, ok := v.(starlark.Iterable)
	if !ok {
		return v, nil // not iterable: the builtin says so
	}
	iter := it.Iterate()
	defer iter.Done()
	var t starlark.Tuple
	var x starlark.Value
	for iter.Next(&x) {
		if err := b.charge(costSlot); err != nil {
			return nil, err
		}
		t = append(t, x)
	}
	return t, nil
}

// reprSize bounds the length of str(v) (quoted false) or repr(v)
// (quoted true), stopping once past limit. A value nested deeper than
// maxReprDepth is refused.
func reprSize(v starlark.Value, quoted bool, limit int64) (int64, error) {
	w := reprWalker{limit: limit, path: map[starlark.Value]bool{}}
	w.walk(v, quoted, 0)
	return w.n, w.err
}

type reprWalker struct {
	n, limit int64
	path     map[starlark.Value]bool // mutable containers being walked: a cycle prints as [...]
	err      error
}

func (w *reprWalker) walk(v starlark.Value, quoted bool, depth int) {
	if w.err != nil || w.n > w.limit {
		return
	}
	if depth > maxReprDepth {
		w.err = fmt.Errorf("a value nested more than %d deep cannot be turned into text in a policy script", maxReprDepth)
		return
	}
	switch v := v.(type) {
	case starlark.String:
		if quoted {
			w.n = add(w.n, 4*int64(len(v))+2) // \xNN escapes
		} else {
			w.n = add(w.n, int64(len(v)))
		}
	case starlark.Bytes:
		w.n = add(w.n, 4*int64(len(v))+3)
	case starlark.Int:
		w.n = add(w.n, intBits(v)/3+2) // decimal digits and sign
	case starlark.Float:
		w.n += 32
	case starlark.NoneType, starlark.Bool:
		w.n += 5
	case starlark.Tuple:
		w.n += 3
		for _, e := range v {
			w.n += 2
			w.walk(e, true, depth+1)
		}
	case *starlark.List, *starlark.Dict, *starlark.Set:
		if w.path[v] {
			w.n += 5
			return
		}
		w.path[v] = true
		defer delete(w.path, v)
		w.n += 8
		d, _ := v.(*starlark.Dict)
		iter := v.(starlark.Iterable).Iterate()
		defer iter.Done()
		var e starlark.Value
		for iter.Next(&e) {
			w.n += 2
			w.walk(e, true, depth+1)
			if d != nil { // e is a key
				w.n += 2
				val, _, _ := d.Get(e)
				w.walk(val, true, depth+1)
			}
			if w.err != nil || w.n > w.limit {
				return
			}
		}
	case *hookObject:
		w.n = add(w.n, int64(len(v.String())))
	default:
		w.n += costObject
	}
}
