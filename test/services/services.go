// Package services starts throwaway PostgreSQL, Redis and S3-protocol servers
// for tests when no URL is configured, through the hack/ scripts (which install
// Debian packages or build Go binaries when missing). Each starter returns the
// address and a stop function.
package services

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/picobot/picobot/test/repo"
)

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// ClosedAddr is a loopback address ("127.0.0.1:port") nothing listens on:
// connections to it are refused.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// Unavailable handles a server that could not start: under CI it is fatal
// (tests there must run); elsewhere the caller skips, and this says so loudly.
func Unavailable(what string, err error) (reason string, fatal bool) {
	reason = fmt.Sprintf("%s could not be started: %v", what, err)
	if os.Getenv("CI") != "" {
		return reason, true
	}
	fmt.Fprintf(os.Stderr, "\n!!! SKIPPING tests that need %s: %s\n\n", what, reason)
	return reason, false
}

// hackScript runs hack/<name> with args and returns its trimmed stdout.
func hackScript(name string, args ...string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", name), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s failed: %w: %s", name, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}
