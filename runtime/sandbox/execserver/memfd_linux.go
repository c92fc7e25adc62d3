//go:build linux

package execserver

import (
	"os"

	"golang.org/x/sys/unix"
)

// anonymousFile is a file with no name, in memory: a memfd.
func anonymousFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("picobot-message", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "picobot-message"), nil
}
