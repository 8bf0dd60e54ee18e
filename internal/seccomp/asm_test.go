package seccomp

import (
	"strings"
	"testing"

	"golang.org/x/net/bpf"
)

// pad emits n no-op loads.
func pad(p *program, n int) {
	for range n {
		p.emit(bpf.LoadConstant{Dst: bpf.RegA, Val: 0})
	}
}

func TestResolveOffsets(t *testing.T) {
	var p program
	a, b := p.newLabel(), p.newLabel()
	p.jumpIf(bpf.JumpEqual, 1, a, next) // 0
	p.jumpIf(bpf.JumpEqual, 2, next, b) // 1
	p.jump(b)                           // 2
	p.place(a)
	p.emit(bpf.RetConstant{Val: 1}) // 3
	p.place(b)
	p.emit(bpf.RetConstant{Val: 2}) // 4

	got, err := p.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 1, SkipTrue: 2, SkipFalse: 0},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 2, SkipTrue: 0, SkipFalse: 2},
		bpf.Jump{Skip: 1},
		bpf.RetConstant{Val: 1},
		bpf.RetConstant{Val: 2},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("insn %d = %#v, want %#v", i, got[i], want[i])
		}
	}
}

func TestResolveConditionalLimit(t *testing.T) {
	for _, tc := range []struct {
		gap     int
		wantErr bool
	}{
		{gap: maxCondSkip, wantErr: false},
		{gap: maxCondSkip + 1, wantErr: true},
	} {
		var p program
		l := p.newLabel()
		p.jumpIf(bpf.JumpEqual, 0, l, next)
		pad(&p, tc.gap)
		p.place(l)
		p.emit(bpf.RetConstant{})

		insns, err := p.resolve()
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "limit is 255") {
				t.Errorf("gap %d: err = %v, want jump limit error", tc.gap, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("gap %d: %v", tc.gap, err)
		}
		if got := insns[0].(bpf.JumpIf).SkipTrue; int(got) != tc.gap {
			t.Errorf("gap %d: SkipTrue = %d", tc.gap, got)
		}
	}
}

func TestResolveUnconditionalHasNoByteLimit(t *testing.T) {
	var p program
	l := p.newLabel()
	p.jump(l)
	pad(&p, 1000)
	p.place(l)
	p.emit(bpf.RetConstant{})
	insns, err := p.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got := insns[0].(bpf.Jump).Skip; got != 1000 {
		t.Errorf("Skip = %d, want 1000", got)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Run("unplaced", func(t *testing.T) {
		var p program
		l := p.newLabel()
		p.jump(l)
		p.emit(bpf.RetConstant{})
		if _, err := p.resolve(); err == nil {
			t.Error("want error for a label that was never placed")
		}
	})
	t.Run("backward", func(t *testing.T) {
		var p program
		l := p.newLabel()
		p.place(l)
		p.emit(bpf.LoadConstant{})
		p.jumpIf(bpf.JumpEqual, 0, l, next)
		p.emit(bpf.RetConstant{})
		if _, err := p.resolve(); err == nil {
			t.Error("want error for a backward jump")
		}
	})
	t.Run("past end", func(t *testing.T) {
		var p program
		l := p.newLabel()
		p.jumpIf(bpf.JumpEqual, 0, l, next)
		p.emit(bpf.RetConstant{})
		p.place(l)
		if _, err := p.resolve(); err == nil {
			t.Error("want error for a jump past the last instruction")
		}
	})
	t.Run("too long", func(t *testing.T) {
		var p program
		pad(&p, maxInsns)
		p.emit(bpf.RetConstant{})
		if _, err := p.resolve(); err == nil {
			t.Error("want error for a program longer than BPF_MAXINSNS")
		}
	})
	t.Run("empty", func(t *testing.T) {
		var p program
		if _, err := p.resolve(); err == nil {
			t.Error("want error for an empty program")
		}
	})
}
