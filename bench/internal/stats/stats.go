// Package stats summarises benchmark samples.
package stats

import (
	"math"
	"math/rand/v2"
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

// MedianRatioInterval is a paired bootstrap confidence interval, at level
// (0.95 for 95 %), for the ratio of medians Percentile(b, 50) /
// Percentile(a, 50). a[i] and b[i] must be one pair, measured next to each
// other: each resample draws pairs, not values, so that what the two had in
// common (the machine's load at that moment) stays together. It draws
// resamples resamples from a generator seeded with seed, so the same
// samples always give the same interval. It returns NaN, NaN when a and b
// differ in length or are empty, or when level is not in (0, 1).
func MedianRatioInterval(a, b []float64, level float64, resamples int, seed uint64) (lo, hi float64) {
	n := len(a)
	if n == 0 || len(b) != n || resamples <= 0 || !(level > 0 && level < 1) {
		return math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ra, rb := make([]float64, n), make([]float64, n)
	ratios := make([]float64, 0, resamples)
	for range resamples {
		for i := range n {
			j := rng.IntN(n)
			ra[i], rb[i] = a[j], b[j]
		}
		slices.Sort(ra)
		slices.Sort(rb)
		ratios = append(ratios, sortedPercentile(rb, 50)/sortedPercentile(ra, 50))
	}
	slices.Sort(ratios)
	tail := (1 - level) / 2 * 100
	return sortedPercentile(ratios, tail), sortedPercentile(ratios, 100-tail)
}
