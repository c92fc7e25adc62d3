//go:build !linux

package sandbox

// SealEnvironment does nothing where there is no memfd: the environment
// stays in the initial block.
func SealEnvironment() error { return nil }
