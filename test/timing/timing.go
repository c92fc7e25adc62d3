// Package timing holds what the benchmarks share to report their figures:
// percentiles of measured durations and the process's CPU time.
package timing

import (
	"slices"
	"syscall"
	"time"
)

// Percentile is the p-th (0-1) percentile of d, which it leaves unsorted; 0
// when d is empty.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// CPUTime is the CPU time (user + system) the process has used so far, or
// an error when the kernel cannot say.
func CPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
