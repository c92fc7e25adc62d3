//go:build linux

package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ConfineThread applies the sandbox's Landlock rules for spec (the
// workspace read-write, system folders read-only, signals and abstract
// sockets scoped, TCP connections to the allowed ports only, with the
// socket filter), no_new_privs and the capability drop to the calling OS
// thread, so that a program forked from that thread starts confined without
// a re-executed launcher (the exec server forks every command this way).
// The caller must have called runtime.LockOSThread and must never unlock:
// the thread is confined for good, and Go ends a thread whose goroutine
// returns while locked. It returns the Landlock ABI in force, 0 when the
// kernel has no Landlock (the program then runs with the other layers);
// when the kernel has Landlock but refuses the rules it fails closed.
func ConfineThread(spec Spec) (landlockABI int, err error) {
	abi, err := restrict(spec)
	if err != nil && abi > 0 {
		return abi, err
	}
	if abi == 0 {
		// restrict sets it with the ruleset; without Landlock it still
		// keeps set-user-ID programs from gaining anything.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 0, fmt.Errorf("failed to set no_new_privs: %w", err)
		}
	}
	dropCapabilities()
	return abi, nil
}

// Prepare checks the workspace and creates its temporary folder, what
// Command does before it starts a program; the exec server calls it as the
// sandbox container's user.
func (s Spec) Prepare() error { return s.prepare() }
