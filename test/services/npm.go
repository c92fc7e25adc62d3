package services

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NPMPackage is an npm package at a pinned version, so a new release cannot
// change what a test runs.
type NPMPackage struct{ Name, Version string }

// NPMInstall installs pinned npm packages once into
// $PICOBOT_CACHE/npm/<dir>@<versions> (default ~/.cache/picobot), outside
// the repository, and returns that prefix (the packages are in its
// node_modules) and the node binary. The folder is keyed by the versions,
// so a new pin installs beside the old one; a lock file serialises
// concurrent test runs; a prefix that holds the pinned versions is used
// without asking npm.
func NPMInstall(dir string, pkgs ...NPMPackage) (prefix, node string, err error) {
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", fmt.Errorf("failed to find node (Debian: apt-get install nodejs npm): %w", err)
	}
	cache := os.Getenv("PICOBOT_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", fmt.Errorf("failed to find the cache folder: %w", err)
		}
		cache = filepath.Join(home, ".cache", "picobot")
	}
	versions := make([]string, len(pkgs))
	for i, p := range pkgs {
		versions[i] = p.Version
	}
	prefix = filepath.Join(cache, "npm", dir+"@"+strings.Join(versions, "+"))
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return "", "", fmt.Errorf("failed to create %s: %w", prefix, err)
	}
	lock, err := os.OpenFile(filepath.Join(prefix, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", "", fmt.Errorf("failed to open the install lock: %w", err)
	}
	defer func() { _ = lock.Close() }() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", fmt.Errorf("failed to take the install lock: %w", err)
	}
	if npmInstalled(prefix, pkgs) {
		return prefix, node, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "", fmt.Errorf("failed to find npm (Debian: apt-get install npm): %w", err)
	}
	args := []string{"install", "--prefix", prefix, "--no-audit", "--no-fund", "--save-exact"}
	for _, p := range pkgs {
		args = append(args, p.Name+"@"+p.Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, args...).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("npm %v failed: %w: %s", args, err, out)
	}
	if !npmInstalled(prefix, pkgs) {
		return "", "", fmt.Errorf("npm %v did not install the pinned versions: %s", args, out)
	}
	return prefix, node, nil
}

// npmInstalled reports whether every pinned package is in the prefix.
func npmInstalled(prefix string, pkgs []NPMPackage) bool {
	for _, p := range pkgs {
		raw, err := os.ReadFile(filepath.Join(prefix, "node_modules", p.Name, "package.json"))
		if err != nil {
			return false
		}
		var meta struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(raw, &meta) != nil || meta.Version != p.Version {
			return false
		}
	}
	return true
}
