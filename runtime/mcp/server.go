package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/net/http/httpguts"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/tool"
)

const (
	transportStdio          picobotv1alpha1.MCPTransport = "stdio"
	transportSSE            picobotv1alpha1.MCPTransport = "sse"
	transportStreamableHTTP picobotv1alpha1.MCPTransport = "streamable-http"

	// defaultTimeout bounds a call when the server sets no timeout; the API
	// leaves the default to the runtime. Connection attempts get at least
	// this long even when calls get less: starting a server (npx may first
	// download it) is slower than a call.
	defaultTimeout = 60 * time.Second
	// terminateGrace is how long a stdio server may take to exit after its
	// stdin is closed before it is signalled: well-behaved servers exit at
	// once, and a stuck one should not hold up the runtime's shutdown.
	terminateGrace = 2 * time.Second
	// stderrGrace bounds how long a stdio server's stderr is still read after
	// it exited, in case a descendant that escaped keeps the pipe open.
	stderrGrace = 2 * time.Second
	// maxToolPages stops a server whose tools/list pagination never ends.
	maxToolPages = 100
)

// server is one configured MCP server and its current connection, if any.
type server struct {
	spec     picobotv1alpha1.MCPServer
	opts     *options
	life     context.Context // ends with Manager.Close
	log      *slog.Logger
	timeout  time.Duration
	settings map[string]picobotv1alpha1.MCPToolSetting

	// connMu serialises connection attempts (the first Connect, restarts and
	// Close), so concurrent calls on a dead server start it once.
	connMu sync.Mutex

	mu          sync.Mutex
	conn        *connection
	tools       []*mcpsdk.Tool
	err         string // why the server is not connected; "" when it is or was never tried
	wasUp       bool   // connected at least once, so the next attempt is a restart
	closed      bool
	background  sync.WaitGroup // session watchers and closes started off the call path
	unknownOnce sync.Once
}

func newServer(life context.Context, spec picobotv1alpha1.MCPServer, opts *options) *server {
	s := &server{
		spec:     spec,
		opts:     opts,
		life:     life,
		log:      opts.log.With("mcpServer", spec.Name),
		timeout:  defaultTimeout,
		settings: map[string]picobotv1alpha1.MCPToolSetting{},
	}
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		s.timeout = spec.Timeout.Duration
	}
	for _, st := range spec.Tools {
		s.settings[st.Name] = st
	}
	return s
}

// connection is one live session with a server and what it holds: the child
// process of a stdio server, the HTTP transport of a remote one.
type connection struct {
	session *mcpsdk.ClientSession
	// cmd is a local stdio server's launcher, sandboxed its sandbox.Cmd;
	// proc is a stdio server the sandbox container runs instead.
	cmd        *exec.Cmd
	sandboxed  *sandbox.Cmd
	proc       *execserver.Process
	stderrDone chan struct{}
	http       *http.Transport
	stderr     *stderrTail
	// life carries the transport's long-lived streams (the SSE GET); cancel
	// ends them.
	life   context.Context
	cancel context.CancelFunc

	once sync.Once
	err  error
}

// close ends the session (for stdio: closes stdin, waits briefly, then
// signals), kills what is left of the process group and drops idle HTTP
// connections. It is idempotent.
func (c *connection) close() error {
	c.once.Do(func() {
		if c.session != nil {
			c.err = c.session.Close()
		}
		killGroup(c.cmd)
		if c.sandboxed != nil {
			c.sandboxed.Exit() // releases the launcher's status pipe
		}
		c.stopRemote()
		c.cancel()
		if c.http != nil {
			c.http.CloseIdleConnections()
		}
		// The process was told to stop: how it exited is not an error.
		var exitErr *exec.ExitError
		if errors.As(c.err, &exitErr) || errors.Is(c.err, mcpsdk.ErrConnectionClosed) {
			c.err = nil
		}
	})
	return c.err
}

// current returns the live session, nil when there is none, or ErrClosed.
func (s *server) current() (*mcpsdk.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.conn != nil {
		return s.conn.session, nil
	}
	return nil, nil
}

// ensureConnected returns the live session, connecting first when there is
// none: at start-up, and once per call after the server went away (which
// restarts a stdio server).
func (s *server) ensureConnected(ctx context.Context) (*mcpsdk.ClientSession, error) {
	if sess, err := s.current(); sess != nil || err != nil {
		return sess, err
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	// Another caller may have connected while this one waited.
	if sess, err := s.current(); sess != nil || err != nil {
		return sess, err
	}
	s.mu.Lock()
	restart := s.wasUp
	s.mu.Unlock()
	if restart {
		s.log.Info("Restarting MCP server", "transport", s.spec.Transport)
	}
	c, tools, err := s.dial(ctx)
	s.mu.Lock()
	if err == nil && s.closed {
		s.mu.Unlock()
		_ = c.close()
		return nil, ErrClosed
	}
	if err != nil {
		s.err = err.Error()
		s.mu.Unlock()
		s.log.Warn("Failed to connect MCP server", "transport", s.spec.Transport, "error", err)
		return nil, err
	}
	s.conn, s.tools, s.err, s.wasUp = c, tools, "", true
	s.background.Add(1)
	s.mu.Unlock()
	go s.watch(c)
	s.log.Info("Connected MCP server", "transport", s.spec.Transport, "tools", len(tools))
	s.warnUnknownSettings(tools)
	return c.session, nil
}

// watch notices a session that ended on its own (a crashed process, a
// dropped stream), so Status says so and the next call reconnects.
func (s *server) watch(c *connection) {
	defer s.background.Done()
	err := c.session.Wait()
	s.mu.Lock()
	// After Close the session ending is expected, not news.
	mine := s.conn == c && !s.closed
	if mine {
		s.conn = nil
		s.err = disconnectReason(err, c)
	}
	s.mu.Unlock()
	if mine {
		s.log.Warn("MCP server disconnected", "error", err)
		_ = c.close() // reap the process group
	}
}

// dropSession forgets a session that failed a call at the transport level and
// closes it off the call path, so the next call reconnects.
func (s *server) dropSession(sess *mcpsdk.ClientSession, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.conn.session != sess {
		return
	}
	c := s.conn
	s.conn = nil
	s.err = fmt.Sprintf("disconnected: %v", cause)
	s.background.Go(func() { _ = c.close() })
}

func disconnectReason(err error, c *connection) string {
	msg := "disconnected"
	if err != nil {
		msg += ": " + err.Error()
	}
	if tail := c.stderr.String(); tail != "" {
		msg += "; stderr: " + tail
	}
	return msg
}

// markClosed stops new connection attempts; Manager.Close calls it before
// interrupting the transports so their ending is not taken for a crash.
func (s *server) markClosed() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// close ends the current session, waiting for a connection attempt in flight
// (which Manager.Close has already interrupted) to give up first.
func (s *server) close() error {
	s.mu.Lock()
	s.closed = true
	c := s.conn
	s.conn = nil
	s.mu.Unlock()
	s.connMu.Lock() // a dial in flight (already interrupted) finishes first
	defer s.connMu.Unlock()
	var err error
	if c != nil {
		if err = c.close(); err != nil {
			err = fmt.Errorf("failed to close MCP server %q: %w", s.spec.Name, err)
		}
	}
	s.background.Wait()
	return err
}

// dial connects and lists the server's tools within the connect timeout.
func (s *server) dial(ctx context.Context) (*connection, []*mcpsdk.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout())
	defer cancel()
	stop := context.AfterFunc(s.life, cancel)
	defer stop()

	c := &connection{}
	c.life, c.cancel = context.WithCancel(s.life)
	transport, err := s.transport(c)
	if err != nil {
		_ = c.close()
		return nil, nil, err
	}
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "picobot", Version: version()}, &mcpsdk.ClientOptions{
		Logger: s.log,
		// No roots: PicoBot does not offer any, and a server such as the
		// filesystem one would otherwise ask for them and replace the
		// directories it was configured with.
		Capabilities: &mcpsdk.ClientCapabilities{},
	})
	sess, err := client.Connect(ctx, transport, nil)
	if err != nil {
		_ = c.close()
		return nil, nil, s.dialError(ctx, "failed to connect", err, c)
	}
	c.session = sess
	tools, err := listTools(ctx, sess)
	if err != nil {
		_ = c.close()
		return nil, nil, s.dialError(ctx, "failed to list tools", err, c)
	}
	return c, tools, nil
}

func (s *server) connectTimeout() time.Duration { return max(s.timeout, defaultTimeout) }

func (s *server) dialError(ctx context.Context, what string, err error, c *connection) error {
	switch {
	case s.life.Err() != nil:
		return ErrClosed
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("%s: no answer within %s: %w", what, s.connectTimeout(), err)
	default:
		err = fmt.Errorf("%s: %w", what, err)
	}
	if tail := c.stderr.String(); tail != "" {
		err = fmt.Errorf("%w; stderr: %s", err, tail)
	}
	return err
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}

// listTools follows tools/list pagination to the end.
func listTools(ctx context.Context, sess *mcpsdk.ClientSession) ([]*mcpsdk.Tool, error) {
	if ir := sess.InitializeResult(); ir != nil && ir.Capabilities != nil && ir.Capabilities.Tools == nil {
		return nil, nil // the server offers no tools (prompts or resources only)
	}
	var out []*mcpsdk.Tool
	seen := map[string]bool{}
	params := &mcpsdk.ListToolsParams{}
	for range maxToolPages {
		res, err := sess.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if t != nil && t.Name != "" {
				out = append(out, t)
			}
		}
		if res.NextCursor == "" {
			return out, nil
		}
		if seen[res.NextCursor] {
			return nil, fmt.Errorf("server repeated page cursor %q", res.NextCursor)
		}
		seen[res.NextCursor] = true
		params = &mcpsdk.ListToolsParams{Cursor: res.NextCursor}
	}
	return nil, fmt.Errorf("server returned more than %d pages of tools", maxToolPages)
}

// transport builds the SDK transport for the server's configuration.
func (s *server) transport(c *connection) (mcpsdk.Transport, error) {
	switch s.spec.Transport {
	case transportStdio:
		if s.spec.Command == "" {
			return nil, errors.New("stdio server has no command")
		}
		env, err := s.environ()
		if err != nil {
			return nil, err
		}
		c.stderr = newStderrTail(s.log)
		if s.opts.execServer != nil {
			spec := s.stdioSpec(env)
			return &detachedTransport{inner: &serverTransport{c: s.opts.execServer, conn: c, req: execserver.Request{
				Workspace: spec.Workspace, ReadOnly: spec.ReadOnly, AllowedPorts: spec.AllowedPorts, Env: env,
				Argv: append([]string{s.spec.Command}, s.spec.Args...)}}, life: c.life, cancel: c.cancel}, nil
		}
		return s.localTransport(c, env)
	case transportSSE, transportStreamableHTTP:
		if s.spec.URL == "" {
			return nil, fmt.Errorf("%s server has no url", s.spec.Transport)
		}
		header, err := s.headers()
		if err != nil {
			return nil, err
		}
		c.http = http.DefaultTransport.(*http.Transport).Clone()
		client := &http.Client{Transport: &headerRoundTripper{base: c.http, header: header}}
		var inner mcpsdk.Transport
		if s.spec.Transport == transportSSE {
			inner = &mcpsdk.SSEClientTransport{Endpoint: s.spec.URL, HTTPClient: client}
		} else {
			inner = &mcpsdk.StreamableClientTransport{Endpoint: s.spec.URL, HTTPClient: client}
		}
		return &detachedTransport{inner: inner, life: c.life, cancel: c.cancel}, nil
	}
	return nil, fmt.Errorf("unsupported transport %q (want stdio, sse or streamable-http)", s.spec.Transport)
}

// environ is the environment of a stdio server: the sandbox's allowlist of
// the runtime's own (PATH, locale, TERM, TZ; HOME and PWD the working
// folder), plus the server's env, which wins. Nothing else of the runtime's
// reaches it: the server is someone else's code and needs only what it is
// given.
func (s *server) environ() ([]string, error) {
	var extra []string
	for _, e := range s.spec.Env {
		v, ok, err := s.envValue(e)
		if err != nil {
			return nil, err
		}
		if ok {
			extra = append(extra, e.Name+"="+v)
		}
	}
	return sandbox.Env(s.opts.environ(), s.opts.workDir, nil, extra...), nil
}

// envValue resolves one env entry; ok is false for an optional secret that
// does not exist.
func (s *server) envValue(e corev1.EnvVar) (value string, ok bool, err error) {
	switch {
	case e.ValueFrom == nil:
		return e.Value, true, nil
	case e.ValueFrom.SecretKeyRef != nil:
		ref := *e.ValueFrom.SecretKeyRef
		if s.opts.secrets == nil {
			return "", false, fmt.Errorf("failed to resolve env %s: no secret resolver is configured", e.Name)
		}
		v, err := s.opts.secrets(ref)
		if err != nil {
			if ref.Optional != nil && *ref.Optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("failed to read key %q of secret %q for env %s: %w", ref.Key, ref.Name, e.Name, err)
		}
		return v, true, nil
	}
	return "", false, fmt.Errorf("failed to resolve env %s: only value and valueFrom.secretKeyRef are supported", e.Name)
}

// headers reads the headersSecretRef Secret. Values are trimmed because
// secrets created from files usually end in a newline, which HTTP forbids.
func (s *server) headers() (http.Header, error) {
	ref := s.spec.HeadersSecretRef
	if ref == nil {
		return nil, nil
	}
	if s.opts.headers == nil {
		return nil, fmt.Errorf("failed to read headers secret %q: no headers resolver is configured", ref.Name)
	}
	kv, err := s.opts.headers(ref.Name)
	if err != nil {
		return nil, fmt.Errorf("failed to read headers secret %q: %w", ref.Name, err)
	}
	h := http.Header{}
	for k, v := range kv {
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("failed to use headers secret %q: key %q is not a valid HTTP header name", ref.Name, k)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("failed to use headers secret %q: the value of %q is not a valid HTTP header value", ref.Name, k)
		}
		h.Set(k, v)
	}
	return h, nil
}

// call runs one tool call and turns every outcome into a result for the
// model. Only the caller's own cancellation comes back as an error, so the
// registry reports it as such.
func (s *server) call(ctx context.Context, name string, args json.RawMessage) (tool.Result, error) {
	sess, err := s.ensureConnected(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		return s.notConnected(err), nil
	}
	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := sess.CallTool(callCtx, &mcpsdk.CallToolParams{Name: name, Arguments: args})
	if err == nil {
		return convertResult(res), nil
	}
	var rpcErr *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return tool.Result{}, ctx.Err()
	case callCtx.Err() != nil:
		return tool.Errorf("error: MCP server %s did not answer the call of %s within %s, so it was cancelled; try a smaller request, or check the server with /mcp.", s.spec.Name, name, s.timeout), nil
	case errors.As(err, &rpcErr):
		// The server is up and answered: it refused this call.
		return tool.Errorf("error: MCP server %s rejected the call of %s: %s", s.spec.Name, name, rpcErr.Message), nil
	case errors.Is(err, mcpsdk.ErrConnectionClosed) || s.sessionGone(sess):
		s.dropSession(sess, err)
		return s.notConnected(err), nil
	default:
		// Neither a refusal nor a lost connection (a reply the SDK could not
		// decode, say): keep the session.
		return tool.Errorf("error: MCP server %s failed the call of %s: %v; /mcp shows its status", s.spec.Name, name, err), nil
	}
}

// sessionGone reports whether sess is no longer the live session (the
// watcher saw it end).
func (s *server) sessionGone(sess *mcpsdk.ClientSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn == nil || s.conn.session != sess
}

func (s *server) notConnected(err error) tool.Result {
	if errors.Is(err, ErrClosed) {
		return tool.Errorf("error: MCP server %s is not connected: the runtime is shutting down", s.spec.Name)
	}
	return tool.Errorf("error: MCP server %s is not connected: %v; /mcp shows its status", s.spec.Name, err)
}

// listedTools returns the tools of the live connection (none when down).
func (s *server) listedTools() []*mcpsdk.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	return s.tools
}

// warnUnknownSettings logs tools[] entries that name no listed tool: the
// likely mistake is using the registered mcp_<server>_<tool> name, and the
// setting then silently does nothing.
func (s *server) warnUnknownSettings(tools []*mcpsdk.Tool) {
	s.unknownOnce.Do(func() {
		listed := map[string]bool{}
		for _, t := range tools {
			listed[t.Name] = true
		}
		for _, st := range s.spec.Tools {
			if !listed[st.Name] {
				s.log.Warn("MCP tool setting names no tool of the server; settings use the server's own tool names", "tool", st.Name)
			}
		}
	})
}

// detachedTransport keeps the transport's long-lived streams (the SSE GET) off
// the connect context: that context only bounds the handshake, and ending it
// afterwards must not end the session. Ending it during the attempt still
// aborts the attempt.
type detachedTransport struct {
	inner  mcpsdk.Transport
	life   context.Context
	cancel context.CancelFunc
}

// Connect implements mcpsdk.Transport.
func (t *detachedTransport) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	stop := context.AfterFunc(ctx, t.cancel)
	conn, err := t.inner.Connect(t.life)
	if !stop() {
		if err == nil {
			_ = conn.Close()
		}
		return nil, ctx.Err()
	}
	return conn, err
}

// headerRoundTripper adds the configured headers (e.g. Authorization) to every
// request. Headers the SDK set itself (session id, protocol version) win, so a
// misnamed secret key cannot break the protocol.
type headerRoundTripper struct {
	base   http.RoundTripper
	header http.Header
}

// RoundTrip implements http.RoundTripper.
func (t *headerRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.header) == 0 {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range t.header {
		if _, set := req.Header[k]; !set {
			req.Header[k] = v
		}
	}
	return t.base.RoundTrip(req)
}

// killGroup kills whatever is left of a stdio server's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// stderrTail logs a stdio server's stderr at Debug and keeps its last lines,
// which usually say why a server failed to start.
type stderrTail struct {
	log     *slog.Logger
	mu      sync.Mutex
	partial []byte
	lines   []string
}

const stderrTailLines = 5

func newStderrTail(log *slog.Logger) *stderrTail { return &stderrTail{log: log} }

// Write implements io.Writer.
func (w *stderrTail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.addLine(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > 4096 { // a very long line: keep its start only
		w.addLine(string(w.partial))
		w.partial = w.partial[:0]
	}
	return len(p), nil
}

func (w *stderrTail) addLine(line string) {
	line = strings.TrimSpace(line)
	if line == "" {
		return
	}
	line = truncateRunes(line, 500)
	w.log.Debug("MCP server stderr", "line", line)
	w.lines = append(w.lines, line)
	if len(w.lines) > stderrTailLines {
		w.lines = w.lines[len(w.lines)-stderrTailLines:]
	}
}

// String returns the last stderr lines joined with " | " ("" for a nil tail,
// as remote servers have).
func (w *stderrTail) String() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.lines
	if len(w.partial) > 0 {
		lines = append(append([]string(nil), lines...), strings.TrimSpace(string(w.partial)))
	}
	return strings.Join(lines, " | ")
}
