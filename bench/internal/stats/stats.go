// Package stats summarises benchmark samples.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of samples, linearly
// interpolated between the two nearest ranks (the "type 7" estimator used by
// numpy and R by default). samples need not be sorted and is not modified.
// It returns NaN for no samples or a p outside [0, 100].
func Percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 || math.IsNaN(p) || p < 0 || p > 100 {
		return math.NaN()
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return sortedPercentile(s, p)
}

func sortedPercentile(s []float64, p float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	frac := rank - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}

// Summary is the distribution of one measured quantity. Values are in the
// unit the samples were given in (milliseconds for durations, see Millis).
type Summary struct {
	N    int     `json:"n"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarize computes a Summary of samples. An empty input gives N == 0 and
// zero values.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Summary{
		N:    len(s),
		Min:  s[0],
		P50:  sortedPercentile(s, 50),
		P90:  sortedPercentile(s, 90),
		P95:  sortedPercentile(s, 95),
		P99:  sortedPercentile(s, 99),
		Max:  s[len(s)-1],
		Mean: sum / float64(len(s)),
	}
}

// Millis converts durations to float milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}
