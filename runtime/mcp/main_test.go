package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/picobot/picobot/test/services"
)

// referencePackages are the npm packages of the MCP reference servers the
// tests run against, pinned so a new release cannot change what is tested.
var referencePackages = []struct{ name, version string }{
	{"@modelcontextprotocol/server-everything", "2026.8.31"},
	{"@modelcontextprotocol/server-filesystem", "2026.8.31"},
}

// ref locates the installed servers; empty (with skipReason set) when they
// could not be installed outside CI.
var ref struct {
	node       string // node binary
	everything string // server-everything's dist/index.js
	filesystem string // server-filesystem's dist/index.js
}

var skipReason string

func TestMain(m *testing.M) {
	if err := installReferenceServers(); err != nil {
		reason, fatal := services.Unavailable("the MCP reference servers (npm)", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipReason = reason
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needServers skips a test when the reference servers are missing
// (Unavailable already said so loudly, and made it fatal under CI).
func needServers(t testing.TB) {
	t.Helper()
	if ref.everything == "" {
		t.Skip(skipReason)
	}
}

// installReferenceServers installs the reference servers once into
// $PICOBOT_CACHE/npm/mcp (default ~/.cache/picobot), outside the repository.
// A lock file serialises concurrent test runs; a cache holding the pinned
// versions is used without asking npm.
func installReferenceServers() error {
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Errorf("failed to find node (Debian: apt-get install nodejs npm): %w", err)
	}
	cache := os.Getenv("PICOBOT_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("failed to find the cache folder: %w", err)
		}
		cache = filepath.Join(home, ".cache", "picobot")
	}
	prefix := filepath.Join(cache, "npm", "mcp")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", prefix, err)
	}
	lock, err := os.OpenFile(filepath.Join(prefix, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("failed to open the install lock: %w", err)
	}
	defer func() { _ = lock.Close() }() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("failed to take the install lock: %w", err)
	}
	if !installed(prefix) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			return fmt.Errorf("failed to find npm (Debian: apt-get install npm): %w", err)
		}
		args := []string{"install", "--prefix", prefix, "--no-audit", "--no-fund", "--save-exact"}
		for _, p := range referencePackages {
			args = append(args, p.name+"@"+p.version)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, npm, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("npm %v failed: %w: %s", args, err, out)
		}
		if !installed(prefix) {
			return fmt.Errorf("npm %v did not install the pinned versions: %s", args, out)
		}
	}
	ref.node = node
	ref.everything = entryPoint(prefix, referencePackages[0].name)
	ref.filesystem = entryPoint(prefix, referencePackages[1].name)
	return nil
}

func entryPoint(prefix, pkg string) string {
	return filepath.Join(prefix, "node_modules", pkg, "dist", "index.js")
}

// installed reports whether every pinned package is in the prefix with its
// entry point.
func installed(prefix string) bool {
	for _, p := range referencePackages {
		raw, err := os.ReadFile(filepath.Join(prefix, "node_modules", p.name, "package.json"))
		if err != nil {
			return false
		}
		var meta struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(raw, &meta) != nil || meta.Version != p.version {
			return false
		}
		if _, err := os.Stat(entryPoint(prefix, p.name)); errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}
