package sandbox

import (
	"os"
	"strconv"
	"strings"
)

// SessionMembers lists the processes whose session id is sid, from /proc
// (empty where there is no /proc): the job-control groups an interactive
// shell on a terminal creates, which a kill of its own process group misses.
func SessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...; comm may hold anything, so
		// parse after its closing parenthesis.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 4 && f[3] == strconv.Itoa(sid) {
			out = append(out, pid)
		}
	}
	return out
}
