package services

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Crash kills the server with SIGKILL, as a machine failure would: the
// postmaster and every backend at once, nothing flushed or shut down. It
// returns once they are gone; Resume then starts the server again, which
// recovers from its write-ahead log. The throwaway server runs with
// synchronous_commit=off (hack/postgres.sh), which loses the commits of a
// crash's last moments although it acknowledged them; the store's own
// sessions turn it on (postgres.OpenConfig), so their commits survive.
func (s *PostgresServer) Crash() error {
	raw, err := os.ReadFile(filepath.Join(s.Dir, "data", "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("failed to read the postmaster's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("failed to parse the postmaster's pid %q: %w", raw, err)
	}
	procs := append(childrenOf(pid), pid)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for range 400 {
		alive := false
		for _, p := range procs {
			if syscall.Kill(p, 0) == nil && !zombie(p) {
				alive = true
			}
		}
		if !alive {
			return s.removeStaleLocks()
		}
		time.Sleep(25 * time.Millisecond)
	}
	return errors.New("failed to kill PostgreSQL: its processes are still alive")
}

// removeStaleLocks removes the lock files the killed postmaster left. A
// restarted server removes them itself when their pid is gone, but a
// killed postmaster whose parent (this machine's init) does not reap it
// stays a zombie, whose pid still looks alive to pg_ctl and postgres.
func (s *PostgresServer) removeStaleLocks() error {
	locks, _ := filepath.Glob(filepath.Join(s.Dir, ".s.PGSQL.*"))
	locks = append(locks, filepath.Join(s.Dir, "data", "postmaster.pid"))
	for _, l := range locks {
		if err := os.Remove(l); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("failed to remove stale lock %s: %w", l, err)
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(p); ok && ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// parentOf reads a process's parent from /proc/<pid>/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: read after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// zombie reports whether a process has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}
