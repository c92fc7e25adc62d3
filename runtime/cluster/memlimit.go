package cluster

import (
	"strconv"
	"strings"
)

// Cgroup files holding the container's memory limit (v2, then v1).
const (
	cgroupV2MemoryMax = "/sys/fs/cgroup/memory.max"
	cgroupV1MemoryMax = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// memoryLimitFraction of the container's limit is given to the Go runtime as
// its soft limit; the rest covers memory charged to the container that the
// runtime does not account for (the binary's mapped pages, page cache,
// kernel memory).
const memoryLimitFraction = 0.9

// memoryLimit returns the soft memory limit for the Go runtime derived from
// the container's cgroup memory limit, or false when GOMEMLIMIT is set (the
// runtime already applied it) or the container has no limit.
//
// Without it the garbage collector only follows GOGC: a session pod whose
// heap doubles during a large turn (a long conversation, a big tool result)
// can be OOM-killed while collecting sooner would have kept it under its
// limit. The soft limit makes the collector work harder only near the limit,
// so it costs nothing in the common case.
func memoryLimit(env func(string) string, readFile func(string) ([]byte, error)) (int64, bool) {
	if env("GOMEMLIMIT") != "" {
		return 0, false
	}
	for _, path := range []string{cgroupV2MemoryMax, cgroupV1MemoryMax} {
		b, err := readFile(path)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(v, 10, 64)
		// "max" (v2) or a page-rounded MaxInt64 (v1) mean no limit.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return int64(float64(n) * memoryLimitFraction), true
	}
	return 0, false
}
