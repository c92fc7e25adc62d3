package sandbox

import (
	"os"
	"strconv"
	"strings"
)

// Descendants lists the processes descended from pid (its children, theirs,
// and so on), from /proc (empty where there is no /proc): those that left
// its process group and session (setsid) included, not those already
// orphaned (a double fork).
func Descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(e.Name()); len(f) >= 2 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], child)
			}
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// statFields are the fields of /proc/<pid>/stat after the command name
// (state ppid pgrp session ...), nil when it cannot be read.
func statFields(pid string) []string {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	// comm may hold anything, so parse after its closing parenthesis.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

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
		if f := statFields(e.Name()); len(f) >= 4 && f[3] == strconv.Itoa(sid) {
			out = append(out, pid)
		}
	}
	return out
}
