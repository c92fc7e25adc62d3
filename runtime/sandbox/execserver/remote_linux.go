//go:build linux

package execserver

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/tool"
)

// RemoteServer serves a sandbox pod's exec server over TCP and TLS (see
// remote.go): it checks each connection's token, then runs the request
// through Client, the in-process server's control client (Server
// ServeControl), relaying the program's bytes through pipes of its own.
// There is no socket path in a sandbox pod: holding the control socket is
// what starts programs.
type RemoteServer struct {
	Client *Client
	// Token is the pair's; every other one is refused.
	Token string
	// TLS holds the pair's certificate and key.
	TLS *tls.Config
	// Root is the server's workspace folder, where a runtime's paths
	// under its own (hello.Root) are mapped.
	Root string
	Log  *slog.Logger
}

// ServeTLS serves s to a sandbox pod's runtime: over TCP and TLS on l
// (cfg holds the pair's certificate), for connections showing token, until
// ctx ends. The in-process server is reached through a control socket pair
// (ServeControl): there is no socket path a program could connect to.
func (s *Server) ServeTLS(ctx context.Context, l net.Listener, token string, cfg *tls.Config) error {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return fmt.Errorf("failed to create the exec server's control socket: %w", err)
	}
	srvEnd, err := fdConn(fds[0])
	if err != nil {
		_ = syscall.Close(fds[1])
		return err
	}
	cliEnd, err := fdConn(fds[1])
	if err != nil {
		_ = srvEnd.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.ServeControl(ctx, srvEnd) }()
	s.cfg.Log.Info("Exec server is serving over TLS", "address", l.Addr().String(), "workspace", s.cfg.Workspace, "uid", s.uid)
	rs := &RemoteServer{Client: NewControlClient(cliEnd), Token: token, TLS: cfg, Root: s.cfg.Workspace, Log: s.cfg.Log}
	err = rs.Serve(ctx, l)
	cancel()
	_ = cliEnd.Close()
	return errors.Join(err, <-served)
}

// helloTimeout bounds a connection's TLS handshake and hello.
const helloTimeout = 10 * time.Second

// outputGrace is how long a program's output may still flow after it
// ended (what a descendant that left its group still writes) before its
// end is reported.
const outputGrace = 2 * time.Second

// Serve accepts connections on l until ctx ends.
func (s *RemoteServer) Serve(ctx context.Context, l net.Listener) error {
	if s.Token == "" || s.TLS == nil || s.Client == nil {
		return errors.New("failed to serve the exec server over TLS: a token, a certificate and a control client are required")
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	cfg := s.TLS.Clone()
	cfg.MinVersion = tls.VersionTLS13
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("failed to accept on %q: %w", l.Addr(), err)
		}
		wg.Go(func() { s.handle(tls.Server(c, cfg)) })
	}
}

func (s *RemoteServer) handle(c *tls.Conn) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(helloTimeout))
	if err := c.Handshake(); err != nil {
		s.Log.Warn("Exec server refused a connection", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	fc := newFrameConn(c)
	t, b, err := fc.read()
	var h hello
	if err == nil && t != frameHello {
		err = fmt.Errorf("the first frame is a %q, not a hello", t)
	}
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err == nil && subtle.ConstantTimeCompare([]byte(h.Token), []byte(s.Token)) != 1 {
		err = errors.New("the exec server refused the connection: wrong token")
	}
	if err != nil {
		s.Log.Warn("Exec server refused a connection", "remote", c.RemoteAddr().String(), "err", err)
		_ = fc.writeJSON(frameMsg, message{Type: typeError, Error: err.Error()})
		return
	}
	_ = c.SetDeadline(time.Time{})
	req := rebase(h.Request, h.Root, s.Root)
	if req.Tool != nil {
		s.callTool(fc, req)
		return
	}
	s.run(fc, req)
}

// callTool answers a tool call; the connection closing ends it.
func (s *RemoteServer) callTool(fc *frameConn, req Request) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _, _ = fc.read() // nothing more comes: a read ends when the runtime closes
		cancel()
	}()
	// The in-process server's answer goes on as it came, undecoded.
	raw, err := s.Client.callToolRaw(ctx, req)
	if err != nil {
		_ = fc.writeJSON(frameMsg, toolAnswer(tool.Result{}, err))
		return
	}
	_ = fc.write(frameMsg, raw)
}

// toolAnswer is a tool call's answer message.
func toolAnswer(res tool.Result, err error) message {
	var ae *tool.ArgumentError
	switch {
	case errors.As(err, &ae):
		return message{Type: typeError, Error: ae.Err.Error(), Argument: true}
	case err != nil:
		return message{Type: typeError, Error: err.Error()}
	}
	return message{Type: typeResult, Result: wireResult(res)}
}

// run starts a program and relays its stdin, output, signals and end.
func (s *RemoteServer) run(fc *frameConn, req Request) {
	var (
		p         *Process
		stdin     *os.File // where the runtime's stdin frames go
		outs      []*os.File
		outFrames []byte
		err       error
	)
	if req.TTY != nil {
		var master *os.File
		p, master, err = s.Client.StartTTY(req, req.TTY.Cols, req.TTY.Rows)
		if err == nil {
			stdin, outs, outFrames = master, []*os.File{master}, []byte{frameStdout}
		}
	} else {
		p, stdin, outs, err = s.startPiped(req)
		outFrames = []byte{frameStdout, frameStderr}
	}
	if err != nil {
		_ = fc.writeJSON(frameMsg, message{Type: typeError, Error: err.Error()})
		return
	}
	defer p.Close()
	if err := fc.writeJSON(frameMsg, message{Type: typeStarted, Pid: p.Pid}); err != nil {
		closeFiles(append(outs, stdin)...)
		return
	}
	go s.control(fc, p, stdin, req.TTY == nil)
	var pumps sync.WaitGroup
	for i, f := range outs {
		pumps.Go(func() {
			buf := make([]byte, chunk)
			for {
				n, err := f.Read(buf)
				if n > 0 && fc.write(outFrames[i], buf[:n]) != nil {
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
	<-p.Done()
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
	}
	closeFiles(append(outs, stdin)...)
	<-drained
	if status, ok, _ := p.Wait(); ok {
		_ = fc.writeJSON(frameMsg, message{Type: typeExited, Status: uint32(status)})
	}
}

// startPiped starts a program on pipes of the server's: it returns the
// write end of its stdin and the read ends of its stdout and stderr.
func (s *RemoteServer) startPiped(req Request) (*Process, *os.File, []*os.File, error) {
	var ends [6]*os.File // stdin r, w; stdout r, w; stderr r, w
	for i := 0; i < 6; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeFiles(ends[:]...)
			return nil, nil, nil, fmt.Errorf("failed to create the program's pipes: %w", err)
		}
		ends[i], ends[i+1] = r, w
	}
	p, err := s.Client.Start(req, ends[0], ends[3], ends[5])
	closeFiles(ends[0], ends[3], ends[5])
	if err != nil {
		closeFiles(ends[1], ends[2], ends[4])
		return nil, nil, nil, err
	}
	return p, ends[1], []*os.File{ends[2], ends[4]}, nil
}

// control applies the runtime's stdin and signals; the connection closing
// kills the program with everything it started. The end of input closes
// stdin when it is a pipe (a terminal's master is also its output).
func (s *RemoteServer) control(fc *frameConn, p *Process, stdin *os.File, pipe bool) {
	defer p.Close()
	inOpen := true
	for {
		t, b, err := fc.read()
		if err != nil {
			return
		}
		switch t {
		case frameStdin:
			switch {
			case !inOpen:
			case len(b) == 0:
				if pipe {
					_ = stdin.Close()
					inOpen = false
				}
			default:
				if _, err := stdin.Write(b); err != nil {
					inOpen = false
				}
			}
		case frameMsg:
			var m message
			if json.Unmarshal(b, &m) == nil && m.Type == typeSignal && m.Signal > 0 && m.Signal < 65 {
				_ = p.Signal(syscall.Signal(m.Signal))
			}
		}
	}
}

// Relay serves the socket protocol to the runtime's own tools (the shell
// and file tools and MCP stdio servers, which reach "the exec server" at
// PICOBOT_SANDBOX_SOCKET) and runs every request on the sandbox pod through
// Client, a remote one (NewRemoteClient). It lives in the runtime's process,
// its socket in the runtime container's private /tmp.
type Relay struct {
	Socket string
	Client *Client
	// Mirror are folders of a workspace (relative to it) that the runtime
	// itself writes and the programs must see: the files a chat message
	// carries (session.UploadsDir). Before each request for a workspace,
	// the files in them that are new or changed since they were last
	// copied are copied to the sandbox pod (one program each, the file on
	// its stdin).
	Mirror []string
	Log    *slog.Logger

	mu     sync.Mutex
	copied map[string]fileStamp
}

// fileStamp is what tells a mirrored file changed.
type fileStamp struct {
	size  int64
	mtime time.Time
}

// Listen opens the relay's socket to the runtime's own user only.
func (r *Relay) Listen() (*net.UnixListener, error) {
	l, err := listen(r.Socket)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(r.Socket, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("failed to close %q to other users: %w", r.Socket, err)
	}
	return l, nil
}

// Serve relays the connections l accepts (Listen) until ctx ends.
func (r *Relay) Serve(ctx context.Context, l *net.UnixListener) error {
	if r.Log == nil {
		r.Log = slog.Default()
	}
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("failed to accept on %q: %w", r.Socket, err)
		}
		wg.Go(func() { r.handle(conn) })
	}
}

func (r *Relay) handle(conn *net.UnixConn) {
	defer func() { _ = conn.Close() }()
	var req Request
	fds, err := receive(conn, &req)
	if err != nil {
		_ = send(conn, message{Type: typeError, Error: err.Error()})
		return
	}
	r.mirror(req.Workspace)
	if req.Tool != nil {
		closeAll(fds)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			var m message
			got, _ := receive(conn, &m)
			closeAll(got)
			cancel()
		}()
		// The sandbox pod's answer goes on as it came, undecoded.
		raw, err := r.Client.callToolRaw(ctx, req)
		if err == nil {
			err = sendLargeRaw(conn, raw)
		} else {
			err = sendLarge(conn, toolAnswer(tool.Result{}, err))
		}
		if err != nil {
			r.Log.Warn("Exec relay failed to answer a tool call", "tool", req.Tool.Name, "err", err)
		}
		return
	}
	var p *Process
	var out []int
	if req.TTY != nil {
		closeAll(fds)
		var master *os.File
		if p, master, err = r.Client.StartTTY(req, req.TTY.Cols, req.TTY.Rows); err == nil {
			defer func() { _ = master.Close() }()
			out = []int{int(master.Fd())}
		}
	} else {
		if len(fds) != 3 {
			closeAll(fds)
			_ = send(conn, message{Type: typeError, Error: fmt.Sprintf("want stdin, stdout and stderr, got %d descriptors", len(fds))})
			return
		}
		files := []*os.File{os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "stdout"), os.NewFile(uintptr(fds[2]), "stderr")}
		p, err = r.Client.Start(req, files[0], files[1], files[2])
		closeFiles(files...)
	}
	if err != nil {
		_ = send(conn, message{Type: typeError, Error: err.Error()})
		return
	}
	defer p.Close()
	if err := send(conn, message{Type: typeStarted, Pid: p.Pid}, out...); err != nil {
		return
	}
	go func() {
		defer p.Close()
		for {
			var m message
			got, err := receive(conn, &m)
			closeAll(got)
			if err != nil {
				return
			}
			if m.Type == typeSignal && m.Signal > 0 && m.Signal < 65 {
				_ = p.Signal(syscall.Signal(m.Signal))
			}
		}
	}()
	if status, ok, _ := p.Wait(); ok {
		_ = send(conn, message{Type: typeExited, Status: uint32(status)})
	}
}

// mirror copies the files of r.Mirror in workspace ws that the sandbox pod
// has not got yet. A file that fails to copy is logged and tried again
// with the next request.
func (r *Relay) mirror(ws string) {
	if ws == "" || len(r.Mirror) == 0 {
		return
	}
	for _, d := range r.Mirror {
		dir := filepath.Join(ws, d)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			local, stamp := filepath.Join(dir, e.Name()), fileStamp{size: info.Size(), mtime: info.ModTime()}
			r.mu.Lock()
			done := r.copied[local] == stamp
			r.mu.Unlock()
			if done {
				continue
			}
			if err := r.push(ws, path.Join(d, e.Name()), local); err != nil {
				r.Log.Warn("Exec relay failed to copy a file to the sandbox pod", "file", local, "err", err)
				continue
			}
			r.mu.Lock()
			if r.copied == nil {
				r.copied = map[string]fileStamp{}
			}
			r.copied[local] = stamp
			r.mu.Unlock()
		}
	}
}

// push writes the runtime's file local to rel in workspace ws of the
// sandbox pod.
func (r *Relay) push(ws, rel, local string) error {
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("failed to open %q: %w", local, err)
	}
	defer func() { _ = f.Close() }()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", os.DevNull, err)
	}
	defer func() { _ = null.Close() }()
	p, err := r.Client.Start(Request{Workspace: ws, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Argv: []string{"sh", "-c", `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`, "sh", rel}}, f, null, null)
	if err != nil {
		return err
	}
	status, ok, err := p.Wait()
	p.Close()
	switch {
	case !ok:
		return err
	case status.ExitStatus() != 0:
		return fmt.Errorf("failed to write %q in the sandbox pod: exit status %d", rel, status.ExitStatus())
	}
	return nil
}
