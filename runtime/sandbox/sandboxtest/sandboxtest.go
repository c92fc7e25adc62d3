// Package sandboxtest finds a test's sandboxed processes from outside: they
// run in PID namespaces, so the pids they print are not the host's, and a
// test marks them with an environment variable instead.
package sandboxtest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// MarkEnv is the variable that marks a test's processes.
const MarkEnv = "PICOBOT_TEST_MARK"

// Marked returns the host pids of the live (not zombie) processes whose
// environment has PICOBOT_TEST_MARK=mark.
func Marked(mark string) []int {
	want := []byte("\x00" + MarkEnv + "=" + mark + "\x00")
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			continue
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !zombie(stat) {
			out = append(out, pid)
		}
	}
	return out
}

// zombie reads the state field of /proc/<pid>/stat.
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	f := bytes.Fields(stat[i+1:])
	return len(f) == 0 || string(f[0]) == "Z" || string(f[0]) == "X"
}
