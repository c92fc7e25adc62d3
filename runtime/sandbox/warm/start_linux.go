//go:build linux

package warm

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
)

// start starts b's server in a new sandbox of spec's workspace, on a
// socketpair whose far end is the server's stdin, and watches it. The
// server reads its first connection once it runs: the first program's
// start waits for it there, not here.
func (p *Pool) start(b *box, spec sandbox.Spec) error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to create a warm sandbox's control socket: %w", err)
	}
	far := os.NewFile(uintptr(fds[1]), "warm-sandbox-server")
	defer func() { _ = far.Close() }()
	ctl, err := fdConn(fds[0])
	if err != nil {
		return err
	}
	cmd, err := sandbox.SelfCommand(serverSpec(spec), serverName, spec.Workspace)
	if err != nil {
		_ = ctl.Close()
		return err
	}
	cmd.Stdin, cmd.Stderr = far, os.Stderr
	if err := cmd.Start(); err != nil {
		_ = ctl.Close()
		return fmt.Errorf("failed to start a warm sandbox for %q: %w", spec.Workspace, err)
	}
	b.pid, b.ctl, b.client = cmd.Process.Pid, ctl, execserver.NewControlClient(ctl)
	go func() {
		defer p.wg.Done()
		p.watch(b, cmd.Wait)
	}()
	return nil
}

// hungUp reports whether the far end of ctl is closed, without waiting.
func hungUp(ctl *net.UnixConn) bool {
	raw, err := ctl.SyscallConn()
	if err != nil {
		return true
	}
	hup := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			hup = fds[0].Revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0
		}
	})
	return hup
}
