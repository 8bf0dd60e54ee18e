package stats

import (
	"math"
	"math/rand/v2"
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

func TestMedianRatioInterval(t *testing.T) {
	// b is a with every value 10 % higher: every resample's ratio is 1.1.
	var a, b []float64
	for i := 1; i <= 50; i++ {
		a = append(a, float64(i))
		b = append(b, 1.1*float64(i))
	}
	lo, hi := MedianRatioInterval(a, b, 0.95, 500, 1)
	if math.Abs(lo-1.1) > 1e-9 || math.Abs(hi-1.1) > 1e-9 {
		t.Errorf("interval of an exact 1.1 ratio = %v–%v, want 1.1–1.1", lo, hi)
	}

	// Noisy pairs around a ratio of 1: the interval holds the point
	// estimate, is not empty, and the same seed gives the same interval.
	rng := rand.New(rand.NewPCG(7, 7))
	a, b = nil, nil
	for range 200 {
		load := 10 + 5*rng.Float64() // shared by both halves of a pair
		a = append(a, load+rng.NormFloat64())
		b = append(b, load+rng.NormFloat64())
	}
	point := Percentile(b, 50) / Percentile(a, 50)
	lo, hi = MedianRatioInterval(a, b, 0.95, 2000, 42)
	if !(lo < point && point < hi) {
		t.Errorf("interval %v–%v does not hold the point estimate %v", lo, hi, point)
	}
	if lo2, hi2 := MedianRatioInterval(a, b, 0.95, 2000, 42); lo2 != lo || hi2 != hi {
		t.Errorf("same seed gave %v–%v, then %v–%v", lo, hi, lo2, hi2)
	}
	// A lower level gives a narrower interval.
	if l50, h50 := MedianRatioInterval(a, b, 0.5, 2000, 42); !(l50 >= lo && h50 <= hi && h50-l50 < hi-lo) {
		t.Errorf("50 %% interval %v–%v is not inside the 95 %% one %v–%v", l50, h50, lo, hi)
	}

	for _, tt := range []struct {
		name  string
		a, b  []float64
		level float64
	}{
		{"empty", nil, nil, 0.95},
		{"unpaired", []float64{1, 2}, []float64{1}, 0.95},
		{"level 1", []float64{1}, []float64{1}, 1},
		{"level 0", []float64{1}, []float64{1}, 0},
		{"level NaN", []float64{1}, []float64{1}, math.NaN()},
	} {
		if lo, hi := MedianRatioInterval(tt.a, tt.b, tt.level, 10, 1); !math.IsNaN(lo) || !math.IsNaN(hi) {
			t.Errorf("%s: got %v–%v, want NaN", tt.name, lo, hi)
		}
	}
}
