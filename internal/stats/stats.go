// Package stats holds the arithmetic the benchmarks share to report their figures.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of ds; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}
