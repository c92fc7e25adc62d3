//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
	"syscall"
)

// Command runs name with args with the allowlisted environment in its own
// process group; this system has no namespaces or Landlock (Probe says so).
func Command(spec Spec, name string, args ...string) (*Cmd, error) {
	if err := spec.prepare(); err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir = spec.Env, spec.Workspace
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return &Cmd{Cmd: cmd}, nil
}

func probe() Report {
	return Report{Errors: map[string]string{"namespaces": "not Linux", "private /proc": "not Linux", "landlock": "not Linux", "network": "not Linux"}}
}

// SelfCommand says a warm sandbox needs Linux's namespaces.
func SelfCommand(Spec, string, ...string) (*Cmd, error) {
	return nil, errors.New("failed to start a warm sandbox: not Linux")
}
