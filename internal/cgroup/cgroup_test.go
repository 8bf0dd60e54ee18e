package cgroup

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	for _, id := range []string{"a", "sandbox-1_X", strings.Repeat("z", 64)} {
		if err := validateID(id); err != nil {
			t.Errorf("validateID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "../x", "a/b", "a b", "a.b", strings.Repeat("z", 65), "é"} {
		if err := validateID(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("validateID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		cpus float64
		want int64
	}{{0, 0}, {1, 100_000}, {0.5, 50_000}, {2.25, 225_000}, {0.001, 1_000}} {
		if got := (Limits{CPUs: tc.cpus}).cpuQuotaUsec(); got != tc.want {
			t.Errorf("quota for %v CPUs = %d, want %d", tc.cpus, got, tc.want)
		}
	}
	for _, l := range []Limits{{MemoryBytes: -1}, {Pids: -1}, {CPUs: -1}, {CPUs: math.NaN()}, {CPUs: math.Inf(1)}} {
		if l.validate() == nil {
			t.Errorf("%+v validated, want an error", l)
		}
	}
	if err := (Limits{MemoryBytes: 1 << 20, Pids: 10, CPUs: 1.5}).validate(); err != nil {
		t.Errorf("valid limits: %v", err)
	}
}
