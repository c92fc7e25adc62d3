// Package mcp connects an agent to its Model Context Protocol servers (the
// agent's spec.mcpServers) through the official MCP Go SDK and offers their
// tools to the model as ordinary tool.Tools named mcp_<server>_<tool>.
//
// MCP servers are other people's programs: they may be missing, slow, crash or
// answer with errors. So the Manager never lets one of them break a turn or
// the others: a server that fails to connect is reported in Status (and the
// /mcp command) while the rest work; every failure of a call becomes a tool
// error result the model can read; and a stdio server that died is started
// again on the next call of one of its tools.
//
// MCP does not say whether a tool has side effects, and servers' own hints are
// not trusted for scheduling: a tool runs concurrently with others only when
// the agent's tools[] settings mark it readOnly and not exclusive.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/tool"
)

// SecretResolver returns the value of one key of a Secret, for env entries of
// stdio servers that use valueFrom.secretKeyRef.
type SecretResolver func(sel corev1.SecretKeySelector) (string, error)

// HeadersResolver returns the keys of the named Secret as HTTP headers for a
// remote server's headersSecretRef.
type HeadersResolver func(secretName string) (map[string]string, error)

// Option configures a Manager.
type Option func(*options)

type options struct {
	secrets SecretResolver
	headers HeadersResolver
	workDir string
	log     *slog.Logger
	environ func() []string
	// execServer starts stdio servers in the sandbox container (cluster
	// mode); nil starts them through the runtime's sandbox launcher.
	execServer *execserver.Client
	// ports are the TCP ports stdio servers may connect to besides the
	// sandbox's defaults.
	ports []uint16
}

// WithSecretResolver sets how env valueFrom.secretKeyRef entries are read.
// Without it a server that uses one fails to connect (and says why).
func WithSecretResolver(fn SecretResolver) Option {
	return func(o *options) { o.secrets = fn }
}

// WithHeadersResolver sets how headersSecretRef Secrets are read. Without it a
// server that names one fails to connect (and says why).
func WithHeadersResolver(fn HeadersResolver) Option {
	return func(o *options) { o.headers = fn }
}

// WithWorkDir sets the working directory of stdio servers (the session's
// workspace, so relative paths in their args mean what the user expects).
// Empty keeps the runtime's own working directory.
func WithWorkDir(dir string) Option {
	return func(o *options) { o.workDir = dir }
}

// WithLogger sets the logger; connection changes are logged at Info, server
// stderr and protocol detail at Debug.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithEnviron sets where the base environment of stdio servers comes from
// (default os.Environ). Secret-looking variables are removed from it either
// way.
func WithEnviron(fn func() []string) Option {
	return func(o *options) { o.environ = fn }
}

// WithExecServer starts stdio servers through the exec server of the
// session pod's sandbox container listening on socket, as the shell tools'
// programs. Without it they start there when the environment names the
// server (PICOBOT_SANDBOX_SOCKET), else through the runtime's own sandbox
// launcher. Their working folder must then lie in the sandbox's workspace
// folder.
func WithExecServer(socket string) Option {
	return func(o *options) { o.execServer = execserver.NewClient(socket) }
}

// WithAllowedPorts lets stdio servers connect to the TCP ports ports
// besides the sandbox's defaults, as the shell tools' programs (the Agent's
// spec.tools.network.allowedPorts): a server that talks to a database of
// the user's needs its port here.
func WithAllowedPorts(ports ...uint16) Option {
	return func(o *options) { o.ports = append(o.ports, ports...) }
}

// ErrClosed is returned by Connect, and reported by tool calls, after Close.
var ErrClosed = errors.New("MCP manager is closed")

// Manager owns the connections to one agent's MCP servers. Build it with
// NewManager, call Connect once at start-up, register Tools, and Close it when
// the runtime stops. It is safe for concurrent use.
type Manager struct {
	opts    options
	servers []*server
	// life ends with Close; connection attempts and the transports' long-lived
	// streams hang off it, so Close interrupts them all.
	life context.Context
	stop context.CancelFunc

	mu     sync.Mutex
	tools  []*mcpTool
	closed bool
}

// NewManager returns a Manager for servers; nothing is started until Connect.
func NewManager(servers []picobotv1alpha1.MCPServer, opts ...Option) *Manager {
	o := options{environ: os.Environ}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.execServer == nil {
		for _, kv := range o.environ() {
			if sock, ok := strings.CutPrefix(kv, execserver.SocketEnv+"="); ok && sock != "" {
				o.execServer = execserver.NewClient(sock)
			}
		}
	}
	m := &Manager{opts: o}
	m.life, m.stop = context.WithCancel(context.Background())
	for _, spec := range servers {
		m.servers = append(m.servers, newServer(m.life, spec, &m.opts))
	}
	return m
}

// Connect connects every server that is not connected yet, concurrently, and
// lists its tools. A server that fails does not stop the others: its error is
// kept for Status. Connect returns an error only when ctx ends first (or after
// Close); each server's attempt is also bounded by its timeout (at least 60s,
// since starting a server can take longer than a call).
func (m *Manager) Connect(ctx context.Context) error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Go(func() { _, _ = s.ensureConnected(ctx) })
	}
	wg.Wait()
	m.buildTools()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("failed to connect MCP servers: %w", err)
	}
	return nil
}

// buildTools wraps the listed tools of every connected server, in server
// order then the server's own order, so names (and their collision suffixes)
// come out the same on every start.
func (m *Manager) buildTools() {
	used := map[string]bool{}
	var tools []*mcpTool
	for _, s := range m.servers {
		for _, t := range s.listedTools() {
			mt := newTool(s, t, used)
			used[mt.name] = true
			tools = append(tools, mt)
		}
	}
	m.mu.Lock()
	m.tools = tools
	m.mu.Unlock()
}

// Tools returns the MCP tools found by the last Connect, ready to register.
// Servers that failed to connect contribute none.
func (m *Manager) Tools() []tool.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]tool.Tool, 0, len(m.tools))
	for _, t := range m.tools {
		out = append(out, t)
	}
	return out
}

// Close ends every session and kills the stdio servers' processes (and
// whatever they started). Calls after Close fail with ErrClosed.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	for _, s := range m.servers {
		s.markClosed()
	}
	m.stop()
	errs := make([]error, len(m.servers))
	var wg sync.WaitGroup
	for i, s := range m.servers {
		wg.Go(func() { errs[i] = s.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
