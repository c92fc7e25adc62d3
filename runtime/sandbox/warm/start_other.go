//go:build !linux

package warm

import (
	"errors"
	"net"

	"github.com/picobot/picobot/runtime/sandbox"
)

// start says warm sandboxes need Linux (New leaves them off elsewhere).
func (p *Pool) start(*box, sandbox.Spec) error {
	return errors.New("failed to start a warm sandbox: not Linux")
}

func hungUp(*net.UnixConn) bool { return true }
