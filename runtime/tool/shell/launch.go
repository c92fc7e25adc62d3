package shell

import (
	"fmt"
	"os"
	"syscall"

	"github.com/creack/pty"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
)

// launcher starts the tools' programs: through the runtime's own sandbox
// launcher (embedded mode, or a pod without a sandbox container), or through
// the exec server of the session pod's sandbox container.
type launcher interface {
	// start runs argv with stdin (nil: /dev/null) and stdout and stderr
	// both into out, as the leader of its own process group.
	start(spec sandbox.Spec, argv []string, stdin, out *os.File) (program, error)
	// startTTY runs argv on a new terminal of cols x rows and returns the
	// terminal's master.
	startTTY(spec sandbox.Spec, argv []string, cols, rows int) (program, *os.File, error)
}

// program is a started program.
type program interface {
	// wait blocks until the program ended and says how (ok false: no
	// status, err says why). Call it once.
	wait() (status syscall.WaitStatus, ok bool, err error)
	// kill sends SIGKILL to the program's process group (on a terminal,
	// its whole session): everything it started.
	kill()
}

// localLauncher starts programs through sandbox.Command.
type localLauncher struct{}

func (localLauncher) start(spec sandbox.Spec, argv []string, stdin, out *os.File) (program, error) {
	cmd, err := sandbox.Command(spec, argv[0], argv[1:]...)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if err := cmd.Start(); err != nil {
		cmd.Exit()
		return nil, fmt.Errorf("failed to start command: %w", err)
	}
	return &localProgram{cmd: cmd}, nil
}

func (localLauncher) startTTY(spec sandbox.Spec, argv []string, cols, rows int) (program, *os.File, error) {
	cmd, err := sandbox.Command(spec, argv[0], argv[1:]...)
	if err != nil {
		return nil, nil, err
	}
	// pty starts the program as the leader of a new session (and so of its
	// own process group).
	cmd.SysProcAttr.Setpgid = false
	f, err := pty.StartWithSize(cmd.Cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		cmd.Exit()
		return nil, nil, fmt.Errorf("failed to start %q on a terminal: %w", argv[len(argv)-1], err)
	}
	return &localProgram{cmd: cmd, tty: true}, f, nil
}

// localProgram is a child of the runtime: its pid is its process group's
// (and on a terminal its session's) id.
type localProgram struct {
	cmd *sandbox.Cmd
	tty bool
}

func (p *localProgram) wait() (syscall.WaitStatus, bool, error) {
	err := p.cmd.Wait()
	ws, ok := p.cmd.Exit()
	return ws, ok, err
}

func (p *localProgram) kill() {
	// Even after the leader exited its group and session may live on; the
	// ids cannot have been reused while anything still uses them.
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if p.tty {
		for _, m := range sandbox.SessionMembers(pid) {
			_ = syscall.Kill(m, syscall.SIGKILL)
		}
	}
}

// serverLauncher starts programs through the sandbox container's exec
// server.
type serverLauncher struct{ c *execserver.Client }

func request(spec sandbox.Spec, argv []string) execserver.Request {
	return execserver.Request{Workspace: spec.Workspace, ReadOnly: spec.ReadOnly, ReadWrite: spec.ReadWrite,
		AllowedPorts: spec.AllowedPorts, Env: spec.Env, Argv: argv}
}

func (l serverLauncher) start(spec sandbox.Spec, argv []string, stdin, out *os.File) (program, error) {
	if err := execserver.ShareWorkspace(spec.Workspace); err != nil {
		return nil, err
	}
	p, err := l.c.Start(request(spec, argv), stdin, out, out)
	if err != nil {
		return nil, err
	}
	return serverProgram{p}, nil
}

func (l serverLauncher) startTTY(spec sandbox.Spec, argv []string, cols, rows int) (program, *os.File, error) {
	if err := execserver.ShareWorkspace(spec.Workspace); err != nil {
		return nil, nil, err
	}
	p, master, err := l.c.StartTTY(request(spec, argv), uint16(cols), uint16(rows))
	if err != nil {
		return nil, nil, err
	}
	return serverProgram{p}, master, nil
}

// serverProgram is a program of the exec server; the server kills what is
// left of its group when it ends and everything when the connection closes.
type serverProgram struct{ p *execserver.Process }

func (s serverProgram) wait() (syscall.WaitStatus, bool, error) {
	ws, ok, err := s.p.Wait()
	s.p.Close()
	return ws, ok, err
}

func (s serverProgram) kill() { _ = s.p.Signal(syscall.SIGKILL) }
