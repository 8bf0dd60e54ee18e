package stats

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		in   []float64
		p    float64
		want float64
	}{
		{[]float64{5}, 50, 5},
		{[]float64{5}, 95, 5},
		{[]float64{1, 2, 3, 4, 5}, 0, 1},
		{[]float64{1, 2, 3, 4, 5}, 50, 3},
		{[]float64{1, 2, 3, 4, 5}, 100, 5},
		{[]float64{5, 1, 4, 2, 3}, 50, 3}, // unsorted input
		{[]float64{1, 2, 3, 4}, 50, 2.5},  // interpolated between ranks
		{[]float64{1, 2, 3, 4}, 25, 1.75},
		{[]float64{10, 20}, 95, 19.5},
	}
	for _, tt := range tests {
		if got := Percentile(tt.in, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.in, tt.p, got, tt.want)
		}
	}
	// 1..100: p95 lies between the 95th and 96th values.
	var h []float64
	for i := 1; i <= 100; i++ {
		h = append(h, float64(i))
	}
	if got := Percentile(h, 95); math.Abs(got-95.05) > 1e-9 {
		t.Errorf("Percentile(1..100, 95) = %v, want 95.05", got)
	}
}

func TestPercentileEdgeCases(t *testing.T) {
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of no samples should be NaN")
	}
	for _, p := range []float64{-1, 101, math.NaN()} {
		if !math.IsNaN(Percentile([]float64{1, 2}, p)) {
			t.Errorf("Percentile(_, %v) should be NaN", p)
		}
	}
	in := []float64{3, 1, 2}
	Percentile(in, 50)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("Percentile modified its input: %v", in)
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{4, 1, 3, 2})
	if s.N != 4 || s.Min != 1 || s.Max != 4 || s.P50 != 2.5 || s.Mean != 2.5 {
		t.Errorf("Summarize = %+v", s)
	}
	if z := Summarize(nil); z != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", z)
	}
}

func TestMillis(t *testing.T) {
	got := Millis([]time.Duration{1500 * time.Microsecond, 2 * time.Millisecond})
	if got[0] != 1.5 || got[1] != 2 {
		t.Errorf("Millis = %v", got)
	}
}
