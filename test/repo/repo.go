// Package repo finds the repository's root for tests. It imports nothing
// but the standard library, so a test binary that needs the hack/ scripts
// (test/services) links no Kubernetes client: the sandbox's tests re-execute
// their binary as the launcher of every program, and a binary that
// registers Kubernetes types at init starts tens of milliseconds slower.
package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Root walks up from the working directory to the folder holding go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("failed to get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("failed to find go.mod above the working directory")
		}
		dir = parent
	}
}
