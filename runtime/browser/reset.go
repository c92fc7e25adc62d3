package browser

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

// ResetResult says what ResetUserData did.
type ResetResult struct {
	// Orphan is the pid of a browser process left holding the folder (a
	// crashed runtime's child) that was killed; 0 when there was none.
	Orphan int
	// Removed is how many entries of the folder were deleted.
	Removed int
}

// ResetUserData empties a profile's local Chrome folder (cookies, logins,
// local storage, cache), keeping the folder itself. A Chromium process of
// this machine still holding the folder (its SingletonLock names it, and
// its command line names the folder) is killed first: it is an orphan, as
// the caller has closed the browser its driver started. Only local folders
// can be reset.
func ResetUserData(dir string, wait time.Duration) (ResetResult, error) {
	var res ResetResult
	if dir == "" {
		return res, errors.New("the profile's browser runs elsewhere (a browser pod); only local profiles can be reset")
	}
	if pid := lockHolder(dir); pid > 0 {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return res, fmt.Errorf("failed to stop browser process %d holding %s: %w", pid, dir, err)
		}
		res.Orphan = pid
		// Its files must not be rewritten after they are removed.
		deadline := time.Now().Add(wait)
		for processRunning(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return res, os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return res, fmt.Errorf("failed to read profile folder %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed++
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("failed to empty profile folder %s: %w", dir, errors.Join(errs...))
	}
	return res, nil
}

// lockHolder is the pid of a live Chromium process of this host that holds
// dir: its SingletonLock link reads "<hostname>-<pid>", and the process's
// command line names dir (so a recycled pid is never killed). 0 for none.
func lockHolder(dir string) int {
	target, err := os.Readlink(filepath.Join(dir, "SingletonLock"))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(target, '-')
	if i < 0 {
		return 0
	}
	host, _ := os.Hostname()
	pid, err := strconv.Atoi(target[i+1:])
	if err != nil || pid <= 1 || target[:i] != host || pid == os.Getpid() {
		return 0
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return 0
	}
	abs, _ := filepath.Abs(dir)
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--user-data-dir="); ok {
			if p, _ := filepath.Abs(v); p == abs {
				return pid
			}
		}
	}
	return 0
}

// processRunning reports whether pid still runs (a zombie counts as gone).
func processRunning(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
