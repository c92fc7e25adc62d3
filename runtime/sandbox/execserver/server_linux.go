//go:build linux

package execserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/tool"
)

// Config configures a Server.
type Config struct {
	// Socket is the path to listen on (in an emptyDir both containers mount).
	Socket string
	// Workspace is the folder every program's workspace must lie in (in the
	// workspace emptyDir; the runtime may create it later); a request for
	// another place is refused.
	Workspace string
	// AllowUIDs are the users that may connect (the runtime container's).
	// Empty allows any user but the server's own: the programs it starts
	// run as that user and must not start programs of their own through it.
	AllowUIDs []int
	// Tools builds the tools the server runs itself (the file tools), for
	// an Agent that may also reach readOnly and readWrite; nil runs none.
	Tools func(readOnly, readWrite []string) []tool.Tool
	// KillDescendants makes a kill of a program (SIGKILL: the runtime's
	// kill, or its connection closed) reach the processes it started that
	// left its process group and session (setsid) too, found by parentage:
	// a warm sandbox outlives its programs, where the launcher's namespace
	// ended with each.
	KillDescendants bool
	// ReadWrite are folders every program may write besides its request's
	// (a warm sandbox's private /tmp, which Landlock sees as a place of
	// its own, not as the workspace folder it is bound from).
	ReadWrite []string
	// CreateWorkspaces makes a request's workspace folder when it is
	// missing: in a sandbox pod the workspace volume is the server's alone,
	// so the runtime cannot create it.
	CreateWorkspaces bool
	Log              *slog.Logger
}

// Server starts programs for the runtime container. Every program is
// forked by the server itself, from an OS thread confined for that program
// (sandbox.ConfineThread: Landlock, no_new_privs, no capabilities), so a
// command costs a fork and an exec, not a re-executed launcher. The server
// is the init of its container (or a child subreaper elsewhere): it reaps
// every orphan and knows each program's end before its pid can be reused.
// So it must be the only thing in its process that starts and waits for
// children, and one process runs one Server.
type Server struct {
	cfg Config
	uid int

	mu    sync.Mutex
	procs map[int]*proc
	// kick wakes the reaper after a fork when it found no children.
	kick chan struct{}
	wg   sync.WaitGroup

	toolsMu sync.Mutex
	// tools caches Config.Tools by allowed paths (an Agent's are the same
	// on every call).
	tools map[string]map[string]tool.Tool
	// confined keeps threads confined for the tool calls' specs.
	confined confinedThreads
}

// proc is one program, the leader of its own process group (and, on a
// terminal, of its own session).
type proc struct {
	pid  int
	tty  bool
	done chan struct{}
	// Set under Server.mu before done is closed.
	status syscall.WaitStatus
	reaped bool
}

// New returns a server; Serve listens.
func New(cfg Config) (*Server, error) {
	if cfg.Workspace == "" {
		return nil, errors.New("failed to configure the exec server: a workspace folder is required")
	}
	ws, err := filepath.Abs(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve workspace %q: %w", cfg.Workspace, err)
	}
	cfg.Workspace = ws
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Server{cfg: cfg, uid: os.Geteuid(), procs: map[int]*proc{}, kick: make(chan struct{}, 1)}, nil
}

// Serve listens on the socket and starts programs until ctx ends; then it
// kills every program it started.
func (s *Server) Serve(ctx context.Context) error {
	if s.cfg.Socket == "" {
		return errors.New("failed to serve: the exec server has no socket to listen on")
	}
	if err := s.becomeParent(); err != nil {
		return err
	}
	l, err := listen(s.cfg.Socket)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	s.cfg.Log.Info("Exec server is serving", "socket", s.cfg.Socket, "workspace", s.cfg.Workspace, "uid", s.uid)
	s.serve(ctx, l.AcceptUnix, true)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("failed to accept on %q", s.cfg.Socket)
}

// ServeControl serves the connections the runtime passes over ctl, one end
// of a socketpair it made (Client from NewControlClient), until the runtime
// closes its end (or dies) or ctx ends; then it kills every program it
// started. Holding ctl is what lets a caller start programs: there is no
// socket path, and no peer check (the programs run as the server's user,
// and so does the runtime that started it: a warm sandbox).
func (s *Server) ServeControl(ctx context.Context, ctl *net.UnixConn) error {
	if err := s.becomeParent(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = ctl.Close() })
	defer stop()
	s.serve(ctx, func() (*net.UnixConn, error) {
		for {
			var m message
			fds, err := receive(ctl, &m)
			if err != nil {
				return nil, err
			}
			if m.Type != typeConnect || len(fds) != 1 {
				closeAll(fds)
				s.cfg.Log.Warn("Exec server ignored a control message", "type", m.Type, "descriptors", len(fds))
				continue
			}
			return fdConn(fds[0])
		}
	}, false)
	return nil
}

// becomeParent readies the process to start programs. The programs run as
// this server's user. Non-dumpable, the server's /proc/<pid> files
// (environ, mem) are closed to them, and so are a program's own between its
// fork and its exec: the child shares the server's memory, environment
// block included, until exec gives it a dumpable image of its own. (A race
// the secrets test caught under load: a program read another one's
// /proc/<pid>/environ mid-fork.) Orphans of the programs come to the
// server, not to the host's init.
func (s *Server) becomeParent() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("failed to make the exec server non-dumpable: %w", err)
	}
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("failed to become a child subreaper: %w", err)
		}
	}
	go s.reap()
	return nil
}

// serve handles the connections accept returns until it fails, then kills
// every program and waits for the handlers. check says whether a
// connection's peer must be checked (authorize).
func (s *Server) serve(ctx context.Context, accept func() (*net.UnixConn, error), check bool) {
	for {
		conn, err := accept()
		if err != nil {
			if ctx.Err() == nil && check {
				s.cfg.Log.Error("Exec server stopped accepting", "err", err)
			}
			break
		}
		s.wg.Go(func() { s.handle(conn, check) })
	}
	s.killAll()
	s.wg.Wait()
}

// listen replaces a stale socket and opens the new one to the pod's shared
// group (fsGroup); who may use it is checked per connection.
func listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %q: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("failed to open %q to the pod's group: %w", path, err)
	}
	return l, nil
}

// handle serves one connection: one program. check says whether the peer
// must be one allowed (a connection passed over the control socket is the
// runtime's by construction).
func (s *Server) handle(conn *net.UnixConn, check bool) {
	defer func() { _ = conn.Close() }()
	// The request is read before the peer is checked: closing a socket
	// with unread data would reset it before the refusal is read.
	var req Request
	fds, err := receive(conn, &req)
	if err != nil {
		_ = send(conn, message{Type: typeError, Error: err.Error()})
		return
	}
	if check {
		if err := s.authorize(conn); err != nil {
			closeAll(fds)
			s.cfg.Log.Warn("Exec server refused a connection", "err", err)
			_ = send(conn, message{Type: typeError, Error: err.Error()})
			return
		}
	}
	if req.Tool != nil {
		closeAll(fds)
		s.callTool(conn, req)
		return
	}
	p, master, err := s.start(req, fds)
	if err != nil {
		_ = send(conn, message{Type: typeError, Error: err.Error()})
		return
	}
	var out []int
	if master != nil {
		out = []int{int(master.Fd())}
	}
	err = send(conn, message{Type: typeStarted, Pid: p.pid}, out...)
	if master != nil {
		_ = master.Close()
	}
	if err != nil {
		s.signal(p, syscall.SIGKILL)
		<-p.done
		return
	}
	go s.control(conn, p)
	<-p.done
	_ = send(conn, message{Type: typeExited, Status: uint32(p.status)})
}

// control applies the runtime's signals; a closed connection kills the
// program with everything it started.
func (s *Server) control(conn *net.UnixConn, p *proc) {
	for {
		var m message
		fds, err := receive(conn, &m)
		closeAll(fds)
		if err != nil {
			s.signal(p, syscall.SIGKILL)
			return
		}
		if m.Type == typeSignal && m.Signal > 0 && m.Signal < 65 {
			s.signal(p, syscall.Signal(m.Signal))
		}
	}
}

// authorize checks the peer's user (SO_PEERCRED): the runtime container's.
func (s *Server) authorize(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("failed to read the peer's credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return fmt.Errorf("failed to read the peer's credentials: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("failed to read the peer's credentials: %w", cerr)
	}
	uid := int(cred.Uid)
	if len(s.cfg.AllowUIDs) > 0 {
		if !slices.Contains(s.cfg.AllowUIDs, uid) {
			return fmt.Errorf("user %d may not start programs here (allowed: %v)", uid, s.cfg.AllowUIDs)
		}
		return nil
	}
	if uid == s.uid {
		return fmt.Errorf("user %d runs the sandbox's programs and may not start programs through the exec server", uid)
	}
	return nil
}

// start checks a request and forks its program.
func (s *Server) start(req Request, fds []int) (*proc, *os.File, error) {
	defer closeAll(fds)
	spec, path, err := s.check(req, len(fds))
	if err != nil {
		return nil, nil, err
	}
	files := make([]uintptr, 0, 3)
	for _, fd := range fds {
		files = append(files, uintptr(fd))
	}
	var master, slave *os.File
	if req.TTY != nil {
		if master, slave, err = pty.Open(); err != nil {
			return nil, nil, fmt.Errorf("failed to open a terminal: %w", err)
		}
		defer func() { _ = slave.Close() }()
		if err := pty.Setsize(master, &pty.Winsize{Cols: req.TTY.Cols, Rows: req.TTY.Rows}); err != nil {
			_ = master.Close()
			return nil, nil, fmt.Errorf("failed to size the terminal: %w", err)
		}
		files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
	}
	attr := &syscall.ProcAttr{Dir: spec.Workspace, Env: spec.Env, Files: files, Sys: &syscall.SysProcAttr{
		Setpgid: req.TTY == nil, Setsid: req.TTY != nil, Setctty: req.TTY != nil, Pdeathsig: syscall.SIGKILL}}
	p, err := s.fork(spec, path, req.Argv, attr, req.TTY != nil)
	if err != nil {
		if master != nil {
			_ = master.Close()
		}
		return nil, nil, err
	}
	return p, master, nil
}

// check validates a request: its descriptors, its workspace (inside the
// server's) and its program (found on the request's PATH).
func (s *Server) check(req Request, nfds int) (sandbox.Spec, string, error) {
	switch {
	case len(req.Argv) == 0:
		return sandbox.Spec{}, "", errors.New("no program named")
	case req.TTY == nil && nfds != 3:
		return sandbox.Spec{}, "", fmt.Errorf("want stdin, stdout and stderr, got %d descriptors", nfds)
	case req.TTY != nil && nfds != 0:
		return sandbox.Spec{}, "", fmt.Errorf("a terminal takes no descriptors, got %d", nfds)
	case req.TTY != nil && (req.TTY.Cols == 0 || req.TTY.Rows == 0):
		return sandbox.Spec{}, "", fmt.Errorf("terminal size %dx%d: both must be positive", req.TTY.Cols, req.TTY.Rows)
	}
	ws := filepath.Clean(req.Workspace)
	if !filepath.IsAbs(ws) || !within(ws, s.cfg.Workspace) {
		return sandbox.Spec{}, "", fmt.Errorf("workspace %q is not inside the sandbox's workspace folder %q", req.Workspace, s.cfg.Workspace)
	}
	if err := s.makeWorkspace(ws); err != nil {
		return sandbox.Spec{}, "", err
	}
	spec := sandbox.Spec{Workspace: ws, ReadOnly: req.ReadOnly, ReadWrite: slices.Concat(req.ReadWrite, s.cfg.ReadWrite),
		AllowedPorts: req.AllowedPorts, Env: req.Env}
	if err := spec.Prepare(); err != nil {
		return sandbox.Spec{}, "", err
	}
	path, err := lookPath(req.Argv[0], req.Env, ws)
	if err != nil {
		return sandbox.Spec{}, "", err
	}
	return spec, path, nil
}

// fork starts the program from an OS thread confined for it. The thread
// stays with the program until it ends (PR_SET_PDEATHSIG follows the thread
// that forked, so the program is killed if the server dies, not when the
// thread would otherwise be reused) and then ends with its goroutine.
func (s *Server) fork(spec sandbox.Spec, path string, argv []string, attr *syscall.ProcAttr, tty bool) (*proc, error) {
	type result struct {
		p   *proc
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: Go ends the confined thread with this goroutine
		if _, err := sandbox.ConfineThread(spec); err != nil {
			res <- result{err: err}
			return
		}
		s.mu.Lock()
		pid, err := syscall.ForkExec(path, argv, attr)
		var p *proc
		if err == nil {
			p = &proc{pid: pid, tty: tty, done: make(chan struct{})}
			s.procs[pid] = p
		}
		s.mu.Unlock()
		if err != nil {
			res <- result{err: fmt.Errorf("failed to start %q: %w", argv[0], err)}
			return
		}
		select {
		case s.kick <- struct{}{}:
		default:
		}
		res <- result{p: p}
		<-p.done
	}()
	r := <-res
	return r.p, r.err
}

// reap waits for every child, programs and orphans alike. It looks at an
// ended child first without reaping it (WNOWAIT), so the zombie still holds
// its pid while the rest of its process group is killed; only then is it
// reaped and its pid free for reuse.
func (s *Server) reap() {
	for {
		pid, err := waitAny()
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			<-s.kick
			continue
		case err != nil:
			s.cfg.Log.Error("Exec server failed to wait for its children", "err", err)
			<-s.kick
			continue
		}
		s.mu.Lock()
		p := s.procs[pid]
		if p != nil {
			killGroup(p, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if p != nil {
			delete(s.procs, pid)
			p.status, p.reaped = ws, err == nil
			if err != nil {
				p.status = syscall.WaitStatus(0xff00) // exit code 255: no status
			}
			close(p.done)
		}
		s.mu.Unlock()
	}
}

// waitAny blocks until a child has ended and returns its pid, leaving it
// unreaped.
func waitAny() (int, error) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		return 0, err
	}
	// si_pid is the first field of siginfo_t's union, which follows three
	// ints and, on 64-bit systems, the union's alignment padding.
	b := (*[unsafe.Sizeof(info)]byte)(unsafe.Pointer(&info))
	off := 3 * 4
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 4 * 4
	}
	return int(*(*int32)(unsafe.Pointer(&b[off]))), nil
}

// signal sends sig to a program's group while it has not been reaped (its
// pid cannot have been reused then).
func (s *Server) signal(p *proc, sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.reaped {
		if sig == syscall.SIGKILL && s.cfg.KillDescendants {
			// Found before the group dies: then they are orphans.
			for _, d := range sandbox.Descendants(p.pid) {
				_ = syscall.Kill(d, sig)
			}
		}
		killGroup(p, sig)
	}
}

// killGroup signals the program's process group and, for SIGKILL on a
// terminal, every other group of its session (an interactive shell's jobs).
func killGroup(p *proc, sig syscall.Signal) {
	_ = syscall.Kill(-p.pid, sig)
	if sig == syscall.SIGKILL && p.tty {
		for _, m := range sandbox.SessionMembers(p.pid) {
			_ = syscall.Kill(m, sig)
		}
	}
}

func (s *Server) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		killGroup(p, syscall.SIGKILL)
	}
}

// lookPath finds name on the request's PATH, as the program's shell would;
// a name with a slash is taken relative to the workspace.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if executable(name) {
			return name, nil
		}
		return "", fmt.Errorf("failed to find %q: not an executable file", name)
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if p := filepath.Join(d, name); filepath.IsAbs(p) && executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("failed to find %q on PATH %q", name, path)
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// makeWorkspace creates ws when the server is to (Config.CreateWorkspaces).
func (s *Server) makeWorkspace(ws string) error {
	if !s.cfg.CreateWorkspaces {
		return nil
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return fmt.Errorf("failed to create workspace %q: %w", ws, err)
	}
	return nil
}
