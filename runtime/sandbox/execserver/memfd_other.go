//go:build !linux

package execserver

import "os"

// anonymousFile is a temporary file removed at once (no memfd here).
func anonymousFile() (*os.File, error) {
	f, err := os.CreateTemp("", "picobot-message-")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}
