//go:build !linux

package cluster

// releaseCodePages is Linux-only (see codepages_linux.go).
func releaseCodePages() (int64, error) { return 0, nil }
