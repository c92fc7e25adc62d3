// Package warm keeps a warm sandbox per session workspace in embedded mode,
// so that a tool program costs a fork and an exec rather than a re-executed
// runtime binary.
//
// Started the usual way (sandbox.Command), every program re-executes the
// big picobot binary as its launcher: Go's runtime start and the page
// faults of a large executable, some 15 ms per `bash -c`. A warm sandbox
// pays that once per session: the first program of a workspace starts,
// through the same launcher (new user, PID and mount namespaces, a private
// /proc, the workspace's /tmp, the Landlock layer of the workspace, no
// capabilities, the allowlisted environment only), an exec server (package
// execserver) as the init of those namespaces, and every program of that
// workspace after it is forked by that server from a thread confined for
// the program's own request (its Landlock rules and allowed ports, and the
// socket filter), over execserver's protocol.
//
// The server listens on nothing: the runtime holds one end of a
// socketpair, the server the other (its stdin), and each program's
// connection is a new socketpair whose far end travels over it
// (execserver.NewControlClient, Server.ServeControl). A program cannot reach
// the server (no path to connect to; Landlock scopes signals and ptrace to
// its own, inner, domain; the server is not dumpable), and what the server
// runs is bounded by its own Landlock layer besides each program's.
//
// Lifetimes: the server is PID 1 of its namespace, so when it dies
// (SIGKILL included) the kernel kills every program in it; it dies with
// the runtime (PR_SET_PDEATHSIG) and when the runtime closes its end of the
// socketpair. The Pool starts a sandbox lazily, keeps it while programs of
// it run, reaps it after Config.Idle without any, starts a new one on the
// next call after one died, and keeps at most Config.Max: past that the
// least recently used idle one is closed, or, when all are busy, the
// program starts the usual way. Where the kernel refuses namespaces every
// program starts the usual way (a warm sandbox without a PID namespace
// would not take its programs down with it).
package warm

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
)

// Defaults of Config.
const (
	DefaultIdle = 5 * time.Minute
	DefaultMax  = 32
)

// serverName is the os.Args[0] of a warm sandbox's exec server (serve.go).
const serverName = "picobot-warm-sandbox"

// Config configures a Pool.
type Config struct {
	// Idle is how long a sandbox with no program running is kept
	// (DefaultIdle when zero).
	Idle time.Duration
	// Max bounds the sandboxes kept at once (DefaultMax when zero; a
	// negative Max turns warm sandboxes off).
	Max   int
	Clock clock.WithDelayedExecution
	Log   *slog.Logger
}

// Pool keeps the warm sandboxes of a runtime, one per workspace (and per
// set of opted-in paths and ports, which are in its own Landlock layer).
type Pool struct {
	cfg Config
	// on: the kernel gives namespaces and Max is not negative.
	on bool

	mu     sync.Mutex
	boxes  map[string]*box
	closed bool
	wg     sync.WaitGroup
}

// box is one warm sandbox.
type box struct {
	key string
	// ready is closed once the server was started (or failed to: err).
	ready chan struct{}
	err   error
	// Set before ready is closed.
	pid    int
	ctl    *net.UnixConn
	client *execserver.Client
	// dead is closed when the server has exited.
	dead chan struct{}
	// Under Pool.mu.
	active int
	used   time.Time
	idle   clock.Timer
	// armed counts the idle timers set, so a late one does nothing.
	armed  int
	killed bool
	// closing: its workspace is going away; the last program to end
	// closes it (CloseWorkspace).
	closing bool
}

// New returns a pool; Close ends its sandboxes.
func New(cfg Config) *Pool {
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.Max == 0 {
		cfg.Max = DefaultMax
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Pool{cfg: cfg, on: cfg.Max > 0 && sandbox.Probe().Namespaces, boxes: map[string]*box{}}
}

// Acquire returns a client of the exec server of spec's warm sandbox,
// starting the sandbox if it has none, and release, to call once the
// program started through it has ended. A nil client (and nil error) says
// to start this program the usual way: warm sandboxes are off, all Max of
// them are busy, or the pool is closed. An error says the sandbox could not
// be started.
func (p *Pool) Acquire(spec sandbox.Spec) (c *execserver.Client, release func(), err error) {
	if !p.on || spec.Workspace == "" {
		return nil, nil, nil
	}
	key := keyOf(spec)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, nil
	}
	b := p.boxes[key]
	if b != nil && b.gone() {
		p.dropLocked(b) // crashed: a new one below
		b = nil
	}
	if b == nil {
		if len(p.boxes) >= p.cfg.Max && !p.evictLocked() {
			p.mu.Unlock()
			return nil, nil, nil
		}
		b = &box{key: key, ready: make(chan struct{}), dead: make(chan struct{}), active: 1}
		p.boxes[key] = b
		p.wg.Add(1) // done by watch, or here when the start failed
		p.mu.Unlock()
		b.err = p.start(b, spec)
		p.mu.Lock()
		close(b.ready)
		switch {
		case b.err != nil:
			close(b.dead)
			p.wg.Done()
		case b.killed: // dropped while starting
			_ = syscall.Kill(b.pid, syscall.SIGKILL)
			_ = b.ctl.Close()
		}
		p.mu.Unlock()
	} else {
		b.active++
		if b.idle != nil {
			b.idle.Stop()
			b.idle = nil
		}
		p.mu.Unlock()
		<-b.ready
	}
	if b.err != nil {
		p.release(b)
		return nil, nil, b.err
	}
	return b.client, func() { p.release(b) }, nil
}

// CloseWorkspace ends the warm sandboxes of workspace, whose folder is going
// away (a stateless turn's scratch workspace): the idle ones at once, a busy
// one when its last program ends. Without it they would stay for Idle,
// holding a removed folder.
func (p *Pool) CloseWorkspace(workspace string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, b := range p.boxes {
		if !strings.HasPrefix(key, workspace+"\x01") {
			continue
		}
		if b.active == 0 {
			p.dropLocked(b)
		} else {
			b.closing = true
		}
	}
}

// Discard ends the sandbox of c, whose server did not answer (it died
// under the caller): the next Acquire starts a new one.
func (p *Pool) Discard(c *execserver.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.boxes {
		select {
		case <-b.ready: // client is set
		default:
			continue
		}
		if b.client == c {
			p.dropLocked(b)
			return
		}
	}
}

// Len is the number of warm sandboxes kept (started or starting).
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.boxes)
}

// Pids are the process ids of the warm sandboxes' servers (in the
// runtime's PID namespace), for tests and diagnostics.
func (p *Pool) Pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, b := range p.boxes {
		select {
		case <-b.ready:
			if b.err == nil {
				out = append(out, b.pid)
			}
		default:
		}
	}
	slices.Sort(out)
	return out
}

// Close ends every warm sandbox, and with them their programs, and waits
// for them; later Acquires say to start programs the usual way.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	for _, b := range p.boxes {
		p.dropLocked(b)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Check is the health check of warm sandboxes: they need namespaces.
func (p *Pool) Check() health.Check {
	c := health.Check{Name: "warm tool sandboxes", OK: p.on}
	switch {
	case p.on:
		c.Message = fmt.Sprintf("each session's programs start from a warm sandbox of its workspace (up to %d, closed after %s idle)", p.cfg.Max, p.cfg.Idle)
	case p.cfg.Max < 0:
		c.OK = true
		c.Message = "off: every program starts through its own sandbox launcher"
	default:
		c.Message = "off: without namespaces every program starts through its own sandbox launcher (some 15 ms more per command)"
		c.Fix = "allow unprivileged user namespaces (see the tool sandbox's namespaces check)"
	}
	return c
}

// release ends one use of b; the last one arms its idle timer.
func (p *Pool) release(b *box) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.active--
	b.used = p.cfg.Clock.Now()
	if b.active > 0 || p.boxes[b.key] != b {
		return
	}
	if b.closing {
		p.dropLocked(b)
		return
	}
	if b.err != nil {
		delete(p.boxes, b.key)
		return
	}
	b.armed++
	armed := b.armed
	// The timer's function only starts the expiry: a clock may call it
	// holding a lock of its own that Stop (under p.mu) takes too.
	b.idle = p.cfg.Clock.AfterFunc(p.cfg.Idle, func() { go p.expire(b, armed) })
}

// expire closes b if it has stayed idle since its timer was armed.
func (p *Pool) expire(b *box, armed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.armed == armed && b.active == 0 && p.boxes[b.key] == b {
		p.dropLocked(b)
	}
}

// evictLocked closes the least recently used sandbox with no program
// running; false when every one is busy.
func (p *Pool) evictLocked() bool {
	var lru *box
	for _, b := range p.boxes {
		if b.active == 0 && (lru == nil || b.used.Before(lru.used)) {
			lru = b
		}
	}
	if lru == nil {
		return false
	}
	p.dropLocked(lru)
	return true
}

// dropLocked forgets b and kills its server: its namespace, and every
// program in it, ends with it.
func (p *Pool) dropLocked(b *box) {
	if p.boxes[b.key] == b {
		delete(p.boxes, b.key)
	}
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
	b.killed = true
	select {
	case <-b.ready:
		if b.err == nil {
			_ = syscall.Kill(b.pid, syscall.SIGKILL)
			_ = b.ctl.Close()
		}
	default:
		// Still starting: start kills it when it finds it dropped.
	}
}

// gone reports whether b's server has exited, or has closed its end of the
// control socket (it died, and its exit may not have been seen yet).
func (b *box) gone() bool {
	select {
	case <-b.dead:
		return true
	case <-b.ready:
		return b.err == nil && hungUp(b.ctl)
	default:
		return false
	}
}

// keyOf names what a warm sandbox is for: a workspace, the paths and ports
// its Landlock layer opens, and the PATH whose folders it may run from.
func keyOf(s sandbox.Spec) string {
	ports := make([]string, len(s.AllowedPorts))
	for i, port := range s.AllowedPorts {
		ports[i] = strconv.Itoa(int(port))
	}
	path := ""
	for _, kv := range s.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return strings.Join([]string{s.Workspace, strings.Join(s.ReadOnly, "\x00"), strings.Join(s.ReadWrite, "\x00"),
		strings.Join(ports, ","), path}, "\x01")
}

// serverSpec is the spec of the server's own sandbox: spec's places and
// ports, and only the allowlisted part of its environment.
func serverSpec(s sandbox.Spec) sandbox.Spec {
	return sandbox.Spec{Workspace: s.Workspace, ReadOnly: s.ReadOnly, ReadWrite: s.ReadWrite, AllowedPorts: s.AllowedPorts,
		Env: sandbox.Env(s.Env, s.Workspace, nil)}
}

// watch waits for the server to exit and forgets it.
func (p *Pool) watch(b *box, wait func() error) {
	err := wait()
	p.mu.Lock()
	close(b.dead)
	killed := b.killed
	if p.boxes[b.key] == b {
		delete(p.boxes, b.key)
	}
	p.mu.Unlock()
	_ = b.ctl.Close()
	if !killed {
		p.cfg.Log.Warn("Warm sandbox ended; the next program starts a new one", "pid", b.pid, "err", err)
	}
}

// fdConn makes a socket descriptor a *net.UnixConn, which then owns it.
func fdConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "warm-sandbox-control")
	defer func() { _ = f.Close() }()
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("failed to use the warm sandbox's control socket: %w", err)
	}
	conn, ok := fc.(*net.UnixConn)
	if !ok {
		_ = fc.Close()
		return nil, fmt.Errorf("failed to use the warm sandbox's control socket: a %T", fc)
	}
	return conn, nil
}
