package seccomp

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// maxInsns is the kernel's limit on the length of a classic BPF program
// (BPF_MAXINSNS).
const maxInsns = 4096

// maxCondSkip is the largest offset a conditional jump can encode: jt and jf
// are 8-bit fields counting instructions to skip.
const maxCondSkip = 255

// label names an instruction whose index is not known yet.
type label int

// next is the label of the instruction right after a jump (offset 0).
const next label = -1

// program is a tiny classic BPF assembler with symbolic jump targets.
//
// Classic BPF can only jump forward, and conditional jumps can skip at most
// 255 instructions, so targets are resolved once the whole program is known
// and assemble reports any jump that does not fit instead of truncating it.
type program struct {
	insns  []bpf.Instruction
	labels []int // label -> instruction index, -1 until placed
	jumps  []pendingJump
}

// pendingJump is a jump instruction whose offsets are still symbolic.
type pendingJump struct {
	at          int // index of the jump in insns
	onTrue, els label
}

// newLabel returns a label to be placed later with place.
func (p *program) newLabel() label {
	p.labels = append(p.labels, -1)
	return label(len(p.labels) - 1)
}

// place binds l to the next instruction to be emitted.
func (p *program) place(l label) {
	p.labels[l] = len(p.insns)
}

// emit appends a non-jump instruction.
func (p *program) emit(ins bpf.Instruction) {
	p.insns = append(p.insns, ins)
}

// jumpIf appends "if A <cond> val goto onTrue else goto els".
func (p *program) jumpIf(cond bpf.JumpTest, val uint32, onTrue, els label) {
	p.jumps = append(p.jumps, pendingJump{at: len(p.insns), onTrue: onTrue, els: els})
	p.insns = append(p.insns, bpf.JumpIf{Cond: cond, Val: val})
}

// jump appends an unconditional jump (32-bit offset) to l.
func (p *program) jump(l label) {
	p.jumps = append(p.jumps, pendingJump{at: len(p.insns), onTrue: l})
	p.insns = append(p.insns, bpf.Jump{})
}

// skip returns how many instructions a jump at index at must skip to land on l.
func (p *program) skip(at int, l label) (int, error) {
	if l == next {
		return 0, nil
	}
	target := p.labels[l]
	if target < 0 {
		return 0, fmt.Errorf("jump at %d: label %d was never placed", at, l)
	}
	if target <= at {
		return 0, fmt.Errorf("jump at %d: target %d is not forward", at, target)
	}
	if target >= len(p.insns) {
		return 0, fmt.Errorf("jump at %d: target %d is past the end of the program", at, target)
	}
	return target - at - 1, nil
}

// resolve returns the program with every symbolic jump replaced by its
// offset, checking the program length and the 8-bit conditional jump limit.
func (p *program) resolve() ([]bpf.Instruction, error) {
	if len(p.insns) == 0 || len(p.insns) > maxInsns {
		return nil, fmt.Errorf("program has %d instructions, want 1..%d", len(p.insns), maxInsns)
	}
	out := append([]bpf.Instruction(nil), p.insns...)
	for _, j := range p.jumps {
		t, err := p.skip(j.at, j.onTrue)
		if err != nil {
			return nil, err
		}
		switch ins := out[j.at].(type) {
		case bpf.Jump:
			ins.Skip = uint32(t)
			out[j.at] = ins
		case bpf.JumpIf:
			f, err := p.skip(j.at, j.els)
			if err != nil {
				return nil, err
			}
			if t > maxCondSkip || f > maxCondSkip {
				return nil, fmt.Errorf("conditional jump at %d skips %d/%d instructions, limit is %d", j.at, t, f, maxCondSkip)
			}
			ins.SkipTrue, ins.SkipFalse = uint8(t), uint8(f)
			out[j.at] = ins
		}
	}
	return out, nil
}
