package execserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Client starts programs through the exec server listening on a socket. It
// holds no connection: each program has its own.
type Client struct {
	socket string
	// remote, when set, is a sandbox pod's exec server reached over TCP
	// and TLS (NewRemoteClient) instead of a socket.
	remote *Remote
	// ctl, when set, is the control socket of a server serving it
	// (Server.ServeControl): a connection is one end of a new socketpair,
	// the other end passed over ctl.
	ctl *net.UnixConn
}

// ErrUnavailable is in the error of a start or tool call that the server
// never answered (it could not be reached, or went away before it said
// whether the program started): nothing of the request runs on.
var ErrUnavailable = errors.New("the exec server is unavailable")

// NewClient returns a client of the server at socket.
func NewClient(socket string) *Client { return &Client{socket: socket} }

// NewControlClient returns a client of the server serving the other end of
// ctl (Server.ServeControl); the caller keeps and closes ctl. Only who holds
// ctl reaches the server: there is no socket path to connect to.
func NewControlClient(ctl *net.UnixConn) *Client {
	return &Client{ctl: ctl}
}

// dial opens a connection to the server: one program or tool call.
func (c *Client) dial() (*net.UnixConn, error) {
	if c.ctl == nil {
		conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: c.socket, Net: "unixpacket"})
		if err != nil {
			return nil, fmt.Errorf("failed to reach the sandbox container's exec server at %q: %w: %w", c.socket, ErrUnavailable, err)
		}
		return conn, nil
	}
	// Under ForkLock, as os/exec wants: no program forked meanwhile
	// inherits the pair before it is close-on-exec.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("failed to create a connection to the exec server: %w", err)
	}
	err = send(c.ctl, message{Type: typeConnect}, fds[1])
	_ = syscall.Close(fds[1])
	if err != nil {
		_ = syscall.Close(fds[0])
		return nil, fmt.Errorf("failed to reach the warm sandbox's exec server: %w: %w", ErrUnavailable, err)
	}
	return fdConn(fds[0])
}

// fdConn makes a connected socket's descriptor a *net.UnixConn, which then
// owns it.
func fdConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "exec-server-conn")
	defer func() { _ = f.Close() }()
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("failed to use an exec server connection: %w", err)
	}
	conn, ok := fc.(*net.UnixConn)
	if !ok {
		_ = fc.Close()
		return nil, fmt.Errorf("failed to use an exec server connection: a %T, not a Unix socket", fc)
	}
	return conn, nil
}

// Socket is the server's socket path ("" for a control client).
func (c *Client) Socket() string { return c.socket }

// Process is a program the server started. Wait for it, then Close.
type Process struct {
	// Pid is the program's process id in the sandbox container (not a pid
	// of the runtime's).
	Pid int

	conn io.Closer
	// sig asks the server to send a signal to the program.
	sig  func(sig int) error
	done chan struct{}
	// Set before done is closed.
	status syscall.WaitStatus
	ok     bool
	err    error

	mu     sync.Mutex
	closed bool
}

// Start runs req.Argv with the given stdin, stdout and stderr (nil stdin
// reads from /dev/null). The server gets duplicates of the files; the caller
// keeps and closes its own.
func (c *Client) Start(req Request, stdin, stdout, stderr *os.File) (*Process, error) {
	if stdin == nil {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("failed to open %s: %w", os.DevNull, err)
		}
		defer func() { _ = null.Close() }()
		stdin = null
	}
	req.TTY = nil
	if c.remote != nil {
		p, _, err := c.remote.start(req, stdin, stdout, stderr)
		return p, err
	}
	p, fds, err := c.start(req, int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	closeAll(fds)
	return p, err
}

// StartTTY runs req.Argv on a new pseudo-terminal of the given size in the
// sandbox container, as the leader of a new session with the terminal as
// its controlling one, and returns the terminal's master.
func (c *Client) StartTTY(req Request, cols, rows uint16) (*Process, *os.File, error) {
	req.TTY = &WinSize{Cols: cols, Rows: rows}
	if c.remote != nil {
		return c.remote.start(req, nil, nil, nil)
	}
	p, fds, err := c.start(req)
	if err != nil {
		closeAll(fds)
		return nil, nil, err
	}
	if len(fds) != 1 {
		closeAll(fds)
		p.Close()
		return nil, nil, fmt.Errorf("failed to start %q on a terminal: the exec server sent %d descriptors, want 1", req.Argv[0], len(fds))
	}
	return p, os.NewFile(uintptr(fds[0]), "/dev/ptmx"), nil
}

func (c *Client) start(req Request, fds ...int) (*Process, []int, error) {
	if len(req.Argv) == 0 {
		return nil, nil, errors.New("failed to start a program: no program named")
	}
	conn, err := c.dial()
	if err != nil {
		return nil, nil, err
	}
	if err := send(conn, req, fds...); err != nil {
		_ = conn.Close()
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, nil, err
	}
	var m message
	got, err := receive(conn, &m)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("failed to start %q in the sandbox container: %w: %w", req.Argv[0], ErrUnavailable, err)
	}
	if m.Type != typeStarted {
		_ = conn.Close()
		closeAll(got)
		if m.Error == "" {
			m.Error = "unexpected answer " + m.Type
		}
		return nil, nil, fmt.Errorf("failed to start %q in the sandbox container: %s", req.Argv[0], m.Error)
	}
	p := &Process{Pid: m.Pid, conn: conn, done: make(chan struct{}),
		sig: func(sig int) error { return send(conn, message{Type: typeSignal, Signal: sig}) }}
	go p.read(conn)
	return p, got, nil
}

// read waits for the exit status (or the loss of the connection).
func (p *Process) read(conn *net.UnixConn) {
	defer close(p.done)
	for {
		var m message
		fds, err := receive(conn, &m)
		closeAll(fds)
		if err != nil {
			p.err = fmt.Errorf("failed to wait for program %d: lost the exec server: %w", p.Pid, err)
			return
		}
		if m.Type == typeExited {
			p.status, p.ok = syscall.WaitStatus(m.Status), true
			return
		}
	}
}

// Wait returns how the program ended: its wait status, with ok false (and
// err saying why) when the server could not tell (it went away).
func (p *Process) Wait() (status syscall.WaitStatus, ok bool, err error) {
	<-p.done
	return p.status, p.ok, p.err
}

// Done is closed once Wait would return.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the program's process group (SIGKILL also reaches the
// other groups of a terminal's session). After the program ended it does
// nothing: the server already killed what was left.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return nil
	default:
	}
	if p.closed {
		return nil
	}
	return p.sig(int(sig))
}

// Close ends the connection; a program still running is killed with
// everything it started.
func (p *Process) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		_ = p.conn.Close()
	}
}
