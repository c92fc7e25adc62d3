package shell

import (
	"errors"
	"fmt"
	"log/slog"
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

// WarmSandboxes hands out the exec servers of warm sandboxes, one per
// session workspace (package warm's Pool).
type WarmSandboxes interface {
	// Acquire returns a client of the exec server of spec's warm sandbox
	// and release, to call once the program started through it ended; a
	// nil client says to start the program through the launcher.
	Acquire(spec sandbox.Spec) (c *execserver.Client, release func(), err error)
	// Discard ends the sandbox of c, whose server did not answer.
	Discard(c *execserver.Client)
	// CloseWorkspace ends the sandboxes of a workspace that is going away.
	CloseWorkspace(workspace string)
}

// warmLauncher starts programs through the exec server of their
// workspace's warm sandbox; where there is none to be had, or it cannot be
// started, through the runtime's own launcher, as before.
type warmLauncher struct{ w WarmSandboxes }

// through tries the warm sandbox of spec; a server that died under the
// call (it never answered, so nothing of the program runs on) is discarded
// and a new one tried once. ok false: start through the launcher.
func (l warmLauncher) through(spec sandbox.Spec, start func(c *execserver.Client) (*execserver.Process, *os.File, error)) (
	prog program, master *os.File, ok bool, err error) {
	for try := 0; try < 2; try++ {
		c, release, err := l.w.Acquire(spec)
		if err != nil {
			slog.Warn("Warm sandbox unavailable; the program starts through the launcher", "workspace", spec.Workspace, "err", err)
			return nil, nil, false, nil
		}
		if c == nil {
			return nil, nil, false, nil
		}
		p, master, err := start(c)
		if err == nil {
			return warmProgram{serverProgram{p}, release}, master, true, nil
		}
		release()
		if !errors.Is(err, execserver.ErrUnavailable) {
			return nil, nil, true, err
		}
		l.w.Discard(c)
	}
	return nil, nil, false, nil
}

// shellChild makes `shell -c command` run command as the shell's child:
// under the warm sandbox's server the program leads its own process group
// (under the launcher it does not: the launcher does), and a shell would
// exec a lone command in its place, so `setsid cmd` (which forks when it
// leads a group) would end at once and its child race the group's kill.
// As under the launcher, the command then runs as long as it runs, in a
// session of its own if it asks for one. (A command killed by a signal
// shows as the shell's exit code 128+n, as in a terminal.)
func shellChild(argv []string) []string {
	if len(argv) == 3 && argv[1] == "-c" {
		return []string{argv[0], "-c", "{ " + argv[2] + "\n}"}
	}
	return argv
}

func (l warmLauncher) start(spec sandbox.Spec, argv []string, stdin, out *os.File) (program, error) {
	prog, _, ok, err := l.through(spec, func(c *execserver.Client) (*execserver.Process, *os.File, error) {
		p, err := c.Start(request(spec, shellChild(argv)), stdin, out, out)
		return p, nil, err
	})
	if !ok {
		return localLauncher{}.start(spec, argv, stdin, out)
	}
	return prog, err
}

func (l warmLauncher) startTTY(spec sandbox.Spec, argv []string, cols, rows int) (program, *os.File, error) {
	prog, master, ok, err := l.through(spec, func(c *execserver.Client) (*execserver.Process, *os.File, error) {
		return c.StartTTY(request(spec, shellChild(argv)), uint16(cols), uint16(rows))
	})
	if !ok {
		return localLauncher{}.startTTY(spec, argv, cols, rows)
	}
	return prog, master, err
}

// warmProgram is a program of a warm sandbox, which release lets go of.
type warmProgram struct {
	serverProgram
	release func()
}

func (w warmProgram) wait() (syscall.WaitStatus, bool, error) {
	defer w.release()
	return w.serverProgram.wait()
}
