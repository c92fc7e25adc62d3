package execserver

// A sandbox pod (cluster mode with the platform's sandbox placement "pod")
// is a pod of its own, so no descriptor can pass between the runtime and the
// exec server: the runtime reaches the server over TCP and TLS instead, and
// the bytes of a program's stdin, stdout and stderr (or its terminal) travel
// in frames on that connection. A frame is a type byte, a 32-bit big-endian
// length and the payload:
//
//	runtime -> server  'h' hello   {token, request}           (first, once)
//	server  -> runtime 'm' message started {pid} | error {error} | result {result}
//	runtime -> server  '0' stdin bytes (empty: end of input)
//	server  -> runtime '1' stdout bytes, '2' stderr bytes     (a terminal's output is '1')
//	runtime -> server  'm' message signal {signal}
//	server  -> runtime 'm' message exited {status}            (after the output; then the server closes)
//
// The runtime trusts one certificate, the pair's (pinned: no authority, no
// name check), and the server refuses a connection whose token is not the
// pair's. One connection is one program or tool call, as over the socket;
// closing it kills the program.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/sandbox/paircred"
)

const (
	frameHello  = 'h'
	frameMsg    = 'm'
	frameStdin  = '0'
	frameStdout = '1'
	frameStderr = '2'
	// maxFrame bounds a frame: a tool call's arguments or result, as a
	// memfd does over the socket.
	maxFrame = maxLarge + 4096
	// chunk is how much output one frame carries at most.
	chunk = 32 << 10
)

// hello opens a connection: the pair's token and what to run.
type hello struct {
	Token   string  `json:"token"`
	Request Request `json:"request"`
	// Root is where the runtime's workspaces lie on its side; the server
	// maps paths under it to its own workspace folder (in a cluster both
	// are /workspace/workspaces; the local pod runner mounts them apart).
	Root string `json:"root,omitempty"`
}

// frameConn reads and writes frames; writes are serialized.
type frameConn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
}

func newFrameConn(c net.Conn) *frameConn { return &frameConn{c: c, r: bufio.NewReaderSize(c, chunk+5)} }

func (f *frameConn) write(t byte, b []byte) error {
	if len(b) > maxFrame {
		return fmt.Errorf("failed to send exec server frame: it is %d bytes, more than %d", len(b), maxFrame)
	}
	buf := make([]byte, 5, 5+len(b))
	buf[0] = t
	binary.BigEndian.PutUint32(buf[1:], uint32(len(b)))
	buf = append(buf, b...)
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if _, err := f.c.Write(buf); err != nil {
		return fmt.Errorf("failed to send exec server frame: %w", err)
	}
	return nil
}

func (f *frameConn) writeJSON(t byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode exec server message: %w", err)
	}
	return f.write(t, b)
}

func (f *frameConn) read() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("failed to read exec server frame: %d bytes, more than %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f.r, b); err != nil {
		return 0, nil, err
	}
	return hdr[0], b, nil
}

// readMessage reads a frame that must be a message.
func (f *frameConn) readMessage() (message, error) {
	t, b, err := f.read()
	if err != nil {
		return message{}, err
	}
	if t != frameMsg {
		return message{}, fmt.Errorf("failed to read exec server message: got a %q frame", t)
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return message{}, fmt.Errorf("failed to decode exec server message: %w", err)
	}
	return m, nil
}

// Remote is a sandbox pod's exec server as the runtime reaches it.
type Remote struct {
	// address finds the server (host:port). stale is the address a
	// connection just failed at ("" the first time): the pod may have been
	// replaced, and a lookup may return the same address until its
	// replacement has one.
	address func(ctx context.Context, stale string) (string, error)
	root    string
	tls     *tls.Config
	token   string
	// wait bounds how long a program's start waits for a reachable server
	// (a replaced sandbox pod's start).
	wait time.Duration

	mu   sync.Mutex
	addr string
}

// RemoteConfig configures NewRemoteClient.
type RemoteConfig struct {
	// CertPEM is the server's certificate: the only one trusted.
	CertPEM []byte
	// Token is shown to the server on every connection.
	Token string
	// Address finds the server (see Remote.address).
	Address func(ctx context.Context, stale string) (string, error)
	// Wait bounds the wait for a reachable server when a start has no
	// deadline of its own; 0 means two minutes.
	Wait time.Duration
	// Root is the runtime's workspaces folder (see hello.Root); empty:
	// the server's.
	Root string
}

// NewRemoteClient returns a client of a sandbox pod's exec server over TCP
// and TLS: it trusts exactly cfg.CertPEM and shows cfg.Token.
func NewRemoteClient(cfg RemoteConfig) (*Client, error) {
	pinned, err := paircred.CertDER(cfg.CertPEM)
	if err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, errors.New("failed to configure the sandbox pod's exec server client: no token")
	}
	if cfg.Address == nil {
		return nil, errors.New("failed to configure the sandbox pod's exec server client: no address lookup")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 2 * time.Minute
	}
	return &Client{remote: &Remote{address: cfg.Address, token: cfg.Token, wait: cfg.Wait, root: cfg.Root, tls: pinnedTLS(pinned)}}, nil
}

// pinnedTLS trusts the one certificate der, whatever its names: the pair's
// Secret is the only authority.
func pinnedTLS(der []byte) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection pins the pair's certificate instead
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, der) {
				return errors.New("the exec server presented a certificate other than its pair's")
			}
			return nil
		},
	}
}

// dial connects to the server and says hello, looking the address up again
// while connections fail (a replaced pod) until ctx ends.
func (r *Remote) dial(ctx context.Context, req Request) (*frameConn, error) {
	r.mu.Lock()
	addr := r.addr
	r.mu.Unlock()
	var last error
	stale := ""
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		if addr == "" || stale != "" {
			if a, err := r.address(ctx, stale); err != nil {
				last = err
			} else if a != "" {
				addr = a
			}
		}
		if addr != "" {
			d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: r.tls}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				r.mu.Lock()
				r.addr = addr
				r.mu.Unlock()
				fc := newFrameConn(c)
				if err := fc.writeJSON(frameHello, hello{Token: r.token, Request: req, Root: r.root}); err != nil {
					_ = c.Close()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				return fc, nil
			}
			last, stale = err, addr
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if last == nil {
				last = ctx.Err()
			}
			return nil, fmt.Errorf("failed to reach the sandbox pod's exec server at %q: %w: %w", addr, ErrUnavailable, last)
		case <-t.C:
		}
	}
}

// start runs req on the server: with stdin, stdout and stderr (duplicated:
// the caller keeps its own), or on a terminal when req.TTY is set, whose
// master is then the local end of a socket pair relayed to the server's.
func (r *Remote) start(req Request, stdin, stdout, stderr *os.File) (*Process, *os.File, error) {
	if len(req.Argv) == 0 {
		return nil, nil, errors.New("failed to start a program: no program named")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.wait)
	defer cancel()
	fc, err := r.dial(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	m, err := fc.readMessage()
	if err != nil {
		_ = fc.c.Close()
		return nil, nil, fmt.Errorf("failed to start %q in the sandbox pod: %w: %w", req.Argv[0], ErrUnavailable, err)
	}
	if m.Type != typeStarted {
		_ = fc.c.Close()
		if m.Error == "" {
			m.Error = "unexpected answer " + m.Type
		}
		return nil, nil, fmt.Errorf("failed to start %q in the sandbox pod: %s", req.Argv[0], m.Error)
	}
	var in, out, errOut, master *os.File
	if req.TTY != nil {
		var far *os.File
		if master, far, err = streamPair(); err != nil {
			_ = fc.c.Close()
			return nil, nil, err
		}
		in, out = far, far
	} else {
		if in, err = dupFile(stdin); err == nil {
			if out, err = dupFile(stdout); err == nil {
				errOut, err = dupFile(stderr)
			}
		}
		if err != nil {
			closeFiles(in, out)
			_ = fc.c.Close()
			return nil, nil, err
		}
	}
	p := &Process{Pid: m.Pid, conn: fc.c, done: make(chan struct{}),
		sig: func(sig int) error { return fc.writeJSON(frameMsg, message{Type: typeSignal, Signal: sig}) }}
	go func() {
		buf := make([]byte, chunk)
		for {
			n, err := in.Read(buf)
			if n > 0 && fc.write(frameStdin, buf[:n]) != nil {
				return
			}
			if err != nil {
				_ = fc.write(frameStdin, nil)
				return
			}
		}
	}()
	go p.readRemote(fc, in, out, errOut)
	return p, master, nil
}

// readRemote copies the program's output to its files until the server
// reports its end (or the connection is lost), then closes them.
func (p *Process) readRemote(fc *frameConn, in, out, errOut *os.File) {
	defer close(p.done)
	defer closeFiles(in, out, errOut)
	for {
		t, b, err := fc.read()
		if err != nil {
			p.err = fmt.Errorf("failed to wait for program %d: lost the sandbox pod's exec server: %w", p.Pid, err)
			return
		}
		switch t {
		case frameStdout:
			_, _ = out.Write(b)
		case frameStderr:
			if errOut != nil {
				_, _ = errOut.Write(b)
			}
		case frameMsg:
			var m message
			if json.Unmarshal(b, &m) == nil && m.Type == typeExited {
				p.status, p.ok = syscall.WaitStatus(m.Status), true
				return
			}
		}
	}
}

// callToolRaw runs a tool call on the server and returns its answer as
// sent (see Client.callToolRaw).
func (r *Remote) callToolRaw(ctx context.Context, req Request) ([]byte, error) {
	name := req.Tool.Name
	dctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, r.wait)
		defer cancel()
	}
	fc, err := r.dial(dctx, req)
	if err != nil {
		return nil, fmt.Errorf("failed to call %s in the sandbox pod: %w", name, err)
	}
	defer func() { _ = fc.c.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = fc.c.Close() })
	defer stop()
	t, raw, err := fc.read()
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("failed to call %s in the sandbox pod: %w", name, ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("failed to call %s in the sandbox pod: lost the exec server: %w", name, err)
	case t != frameMsg:
		return nil, fmt.Errorf("failed to call %s in the sandbox pod: got a %q frame, not a message", name, t)
	}
	return raw, nil
}

// dupFile duplicates f's descriptor (close-on-exec) as a file of its own;
// nil reads from /dev/null.
func dupFile(f *os.File) (*os.File, error) {
	if f == nil {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("failed to open %s: %w", os.DevNull, err)
		}
		return null, nil
	}
	syscall.ForkLock.RLock()
	fd, err := syscall.Dup(int(f.Fd()))
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("failed to duplicate %s: %w", f.Name(), err)
	}
	// A non-blocking duplicate (a pipe of os.Pipe) joins the poller, so
	// closing it ends a pending read.
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// streamPair is a connected pair of stream sockets, as files.
func streamPair() (*os.File, *os.File, error) {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create a terminal relay: %w", err)
	}
	for _, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			closeAll(fds[:])
			return nil, nil, fmt.Errorf("failed to create a terminal relay: %w", err)
		}
	}
	return os.NewFile(uintptr(fds[0]), "/dev/ptmx"), os.NewFile(uintptr(fds[1]), "sandbox-terminal"), nil
}

func closeFiles(fs ...*os.File) {
	seen := map[*os.File]bool{}
	for _, f := range fs {
		if f != nil && !seen[f] {
			seen[f] = true
			_ = f.Close()
		}
	}
}

// rebase maps the paths of req under root (the runtime's workspaces) to
// the same places under to (the server's).
func rebase(req Request, root, to string) Request {
	if root == "" || root == to {
		return req
	}
	path := func(v string) string {
		if v == root || strings.HasPrefix(v, root+"/") {
			return to + strings.TrimPrefix(v, root)
		}
		return v
	}
	paths := func(vs []string) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = path(v)
		}
		return out
	}
	req.Workspace = path(req.Workspace)
	req.ReadOnly, req.ReadWrite = paths(req.ReadOnly), paths(req.ReadWrite)
	env := make([]string, len(req.Env))
	for i, kv := range req.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			kv = k + "=" + path(v)
		}
		env[i] = kv
	}
	req.Env = env
	return req
}
