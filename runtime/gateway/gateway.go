// Package gateway serves PicoBot's client protocol (docs/protocol.md): a JSON
// WebSocket that streams turn events and carries the control channel (dialog
// operations), a REST API for the same, an OpenAI-compatible chat completions
// endpoint, and the web UI. It knows nothing of LLMs or storage: everything
// goes through a Backend, and every request is scoped to the tenant its API key
// belongs to (store.WithTenant on the request context).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// ProtocolVersion is the "v" of every frame and REST answer.
const ProtocolVersion = 1

// Limits of client input.
const (
	MaxFrameBytes  = 256 << 10 // a WebSocket frame
	MaxTextBytes   = 64 << 10  // the text of one message
	MaxBodyBytes   = 1 << 20   // a REST request body
	MaxTitleRunes  = 200       // a dialog title
	maxIDBytes     = 128
	maxChatIDBytes = 200
	maxDialogBytes = 64
	writeTimeout   = 10 * time.Second
	// DefaultStreamKeepAlive is Config.StreamKeepAlive's default.
	DefaultStreamKeepAlive = 10 * time.Second
	defaultHistory         = 50
	maxHistoryLimit        = 500
)

// Channels of gateway clients: session ids are
// "<channel>:<agent>/<chat_id>:<dialog_id>".
const (
	ChannelWeb    = protocol.ChannelWeb
	ChannelOpenAI = protocol.ChannelOpenAI
)

// AgentInfo is an agent as clients see it (runtime/protocol).
type AgentInfo = protocol.AgentInfo

// ModelInfo is an agent's effective model (runtime/protocol).
type ModelInfo = protocol.ModelInfo

// Check is one line of the health report (health.Check).
type Check = health.Check

// Chat is a client's conversation with an agent (runtime/protocol).
type Chat = protocol.Chat

// Send is a message from a client.
type Send struct {
	ID string
	// Channel is the chat's channel (ChannelWeb when empty).
	Channel, Agent, ChatID, Text string
	// Files are the files attached to the message (uploads of the chat,
	// checked by the gateway).
	Files []protocol.File
	// Sink receives the turn's events; it is called from another goroutine.
	Sink func(turn.Event)
}

// Chat is the chat the message goes to.
func (s Send) Chat() Chat { return Chat{Channel: s.Channel, Agent: s.Agent, ChatID: s.ChatID} }

// Outcome is how a send ended.
type Outcome = protocol.Outcome

// Backend is what the gateway needs from the runtime: embedded.Runtime in
// embedded mode, the cluster gateway backend in cluster mode. Every method
// acts for the tenant in ctx (store.TenantFrom) and must not see or touch
// another tenant's state: a session, dialog or artifact of another tenant is
// reported as not found. Errors carry protocol codes through CodedError;
// store.ErrNotFound is reported as the endpoint's "unknown_*" code.
type Backend interface {
	// ListAgents returns the agents the tenant may talk to.
	ListAgents(ctx context.Context) ([]AgentInfo, error)
	// Handle processes a send to the end and returns its outcome.
	Handle(ctx context.Context, s Send) (Outcome, error)
	// Stop cancels the chat's running turn and drops its queued messages;
	// it reports whether a turn was running.
	Stop(ctx context.Context, c Chat) (bool, error)
	// Approve answers the exec approval request with code of the chat's
	// running turn (approve or deny); it reports whether a turn of the
	// chat was waiting on that code.
	Approve(ctx context.Context, c Chat, code string, approve bool) (bool, error)
	// Messages returns the last messages of a session.
	Messages(ctx context.Context, sessionID string, last int) ([]store.Message, error)
	// Artifact opens a stored artifact.
	Artifact(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error)
	// Upload stores a file a client attaches to a message of the chat (as
	// an artifact recorded under UploadScope; SaveUpload does it); the
	// chat's agent must exist for the tenant.
	Upload(ctx context.Context, c Chat, f Upload) (store.Artifact, error)
	// Usage returns the tenant's model use per agent and day in f's range,
	// and its totals of today and this month.
	Usage(ctx context.Context, f store.UsageFilter) ([]store.UsageDay, store.UsageTotals, error)
	// Audit returns the tenant's audit records of tool calls matching f,
	// newest first.
	Audit(ctx context.Context, f store.AuditFilter) ([]store.AuditRecord, error)
	// Health reports the runtime's health service (no tenant in ctx:
	// probes): the report the health tool, /health and `picobot health`
	// show too.
	Health(ctx context.Context) health.Report

	// Dialogs lists the chat's most recent dialogs (not archived, not
	// deleted) and the current dialog id ("" when none).
	Dialogs(ctx context.Context, c Chat) (current string, list []store.Session, err error)
	// CreateDialog starts a new dialog, titled when title is not empty, and
	// makes it current.
	CreateDialog(ctx context.Context, c Chat, title string) (store.Session, error)
	// SwitchDialog makes an existing dialog current.
	SwitchDialog(ctx context.Context, c Chat, dialogID string) (store.Session, error)
	// RenameDialog sets a dialog's title.
	RenameDialog(ctx context.Context, c Chat, dialogID, title string) (store.Session, error)
	// ArchiveDialog hides a dialog from the list without deleting it.
	ArchiveDialog(ctx context.Context, c Chat, dialogID string) (store.Session, error)
	// DeleteDialog soft-deletes a dialog.
	DeleteDialog(ctx context.Context, c Chat, dialogID string) error
	// SearchMessages finds the chat's messages holding every word of text
	// (at most limit, 0 for the store's default), newest first: the
	// store's full-text search (store.MessageSearcher).
	SearchMessages(ctx context.Context, c Chat, text string, limit int) ([]store.MessageHit, error)
}

// Error codes of the protocol (runtime/protocol holds the one definition).
const (
	CodeBadRequest       = protocol.CodeBadRequest
	CodeUnauthorized     = protocol.CodeUnauthorized
	CodeForbidden        = protocol.CodeForbidden
	CodeNotFound         = protocol.CodeNotFound
	CodeUnknownAgent     = protocol.CodeUnknownAgent
	CodeUnknownSession   = protocol.CodeUnknownSession
	CodeUnknownDialog    = protocol.CodeUnknownDialog
	CodeUnknownArtifact  = protocol.CodeUnknownArtifact
	CodeBusy             = protocol.CodeBusy
	CodeStopped          = protocol.CodeStopped
	CodeTooLarge         = protocol.CodeTooLarge
	CodeTimeout          = protocol.CodeTimeout
	CodeUnsupportedMedia = protocol.CodeUnsupportedMedia
	CodeMisdirected      = protocol.CodeMisdirected
	CodeModelRejected    = protocol.CodeModelRejected
	CodeDeadLetter       = protocol.CodeDeadLetter
	CodeUnanswered       = protocol.CodeUnanswered
	CodeRateLimited      = protocol.CodeRateLimited
	CodeNoModel          = protocol.CodeNoModel
	CodeBudgetExhausted  = protocol.CodeBudgetExhausted
	CodeSessionLimit     = protocol.CodeSessionLimit
	CodeMessageLimit     = protocol.CodeMessageLimit
	CodeUnavailable      = protocol.CodeUnavailable
	CodeInternal         = protocol.CodeInternal
)

// statusOf maps protocol codes to HTTP statuses.
var statusOf = map[string]int{
	CodeBadRequest:       http.StatusBadRequest,
	CodeUnauthorized:     http.StatusUnauthorized,
	CodeForbidden:        http.StatusForbidden,
	CodeNotFound:         http.StatusNotFound,
	CodeUnknownAgent:     http.StatusNotFound,
	CodeUnknownSession:   http.StatusNotFound,
	CodeUnknownDialog:    http.StatusNotFound,
	CodeUnknownArtifact:  http.StatusNotFound,
	CodeBusy:             http.StatusConflict,
	CodeStopped:          http.StatusConflict,
	CodeTooLarge:         http.StatusRequestEntityTooLarge,
	CodeTimeout:          http.StatusRequestTimeout,
	CodeUnsupportedMedia: http.StatusUnsupportedMediaType,
	CodeMisdirected:      http.StatusMisdirectedRequest,
	CodeModelRejected:    http.StatusBadRequest,
	CodeDeadLetter:       http.StatusInternalServerError,
	CodeUnanswered:       http.StatusConflict,
	CodeRateLimited:      http.StatusTooManyRequests,
	CodeNoModel:          http.StatusServiceUnavailable,
	CodeBudgetExhausted:  http.StatusTooManyRequests,
	CodeSessionLimit:     http.StatusTooManyRequests,
	CodeMessageLimit:     http.StatusTooManyRequests,
	CodeUnavailable:      http.StatusServiceUnavailable,
	CodeInternal:         http.StatusInternalServerError,
}

// CodedError carries a protocol error code.
type CodedError = protocol.CodedError

// Errorf returns a CodedError with a formatted message.
func Errorf(code, format string, args ...any) error { return protocol.Errorf(code, format, args...) }

// Config configures a Server.
type Config struct {
	Backend Backend
	// Auth resolves requests to principals. Required.
	Auth Authenticator
	// UI is served at "/" when set.
	UI  fs.FS
	Log *slog.Logger
	// DefaultLimit applies to principals that carry no limit of their own;
	// DefaultRateLimit when zero.
	DefaultLimit RateLimit
	// MaxBodyBytes caps REST request bodies; MaxBodyBytes when zero.
	MaxBodyBytes int64
	// OriginPatterns are the browser origins (host patterns, path.Match
	// syntax, e.g. "chat.example.com" or "*.example.com") allowed to open a
	// WebSocket or send a request that changes something, besides the
	// gateway's own origin. None by default: another port of localhost is
	// another site.
	OriginPatterns []string
	// AllowedHosts are the names clients reach the gateway by (the Host
	// header), besides loopback names and addresses; other Hosts get 421.
	// When empty, a keyed gateway answers any Host and a keyless one only
	// loopback names (the DNS-rebinding guard).
	AllowedHosts []string
	// BodyTimeout bounds reading a request body (DefaultBodyTimeout).
	BodyTimeout time.Duration
	// StreamKeepAlive is how often a streamed OpenAI answer sends an SSE
	// comment while no text comes (DefaultStreamKeepAlive).
	StreamKeepAlive time.Duration
	// Metrics records connections, frames, authentication failures and
	// rate-limited requests; nil records nothing.
	Metrics *metrics.Metrics
	// MetricsGatherer, when set, is served on GET /metrics (OpenMetrics or
	// Prometheus text) behind the same API key as /api/.
	MetricsGatherer prometheus.Gatherer
	// TracerProvider starts the trace of each turn the gateway takes (a
	// WebSocket send frame, POST /api/v1/send, a chat completion); the
	// trace continues through the bus (package tracing). Nil traces
	// nothing.
	TracerProvider trace.TracerProvider
	// Nodes pairs and reaches the tenants' devices (`picobot node`, package
	// node); nil answers the node frames and endpoints with not_found.
	Nodes *node.Service
}

// Server is the gateway's HTTP handler.
type Server struct {
	backend     Backend
	auth        Authenticator
	limits      *limiters
	authFails   *authFailures
	bodyTimeout time.Duration
	hosts       []string
	keyless     bool
	keepAlive   time.Duration
	maxBody     int64
	origins     []string
	ui          fs.FS
	log         *slog.Logger
	metrics     *metrics.Metrics
	gatherer    prometheus.Gatherer
	tracer      trace.Tracer
	nodes       *node.Service
	mux         *http.ServeMux
}

// New returns a gateway for one tenant, the way embedded mode serves: with an
// API key, clients must send it; without one, only loopback clients are
// served, browsers only with the key of the web UI this gateway serves (its
// UIKey() when the backend has that method, else a key of this process). The
// tenant is the backend's Tenant() when it has that method, else "default".
// A backend with a Metrics() method gives the gateway its metrics and what
// it serves on /metrics, one with a TracerProvider() method its tracing,
// one with a Nodes() method its paired devices. NewServer configures
// everything else.
func New(b Backend, apiKey string, ui fs.FS, log *slog.Logger) *Server {
	tenant := "default"
	if t, ok := b.(interface{ Tenant() string }); ok && t.Tenant() != "" {
		tenant = t.Tenant()
	}
	uiKey := NewUIKey()
	if k, ok := b.(interface{ UIKey() string }); ok && k.UIKey() != "" {
		uiKey = k.UIKey() // per install: open tabs survive a restart
	}
	var auth Authenticator = Loopback{Tenant: tenant, UIKey: uiKey}
	if apiKey != "" {
		auth = MustStaticKeys(StaticKey{ID: "api-key", Token: apiKey, Tenant: tenant})
	}
	cfg := Config{Backend: b, Auth: auth, UI: ui, Log: log}
	if m, ok := b.(interface {
		Metrics() (*metrics.Metrics, prometheus.Gatherer)
	}); ok {
		cfg.Metrics, cfg.MetricsGatherer = m.Metrics()
	}
	if t, ok := b.(interface{ TracerProvider() trace.TracerProvider }); ok {
		cfg.TracerProvider = t.TracerProvider()
	}
	if n, ok := b.(interface{ Nodes() *node.Service }); ok {
		cfg.Nodes = n.Nodes()
	}
	s, err := NewServer(cfg)
	if err != nil {
		panic(err) // unreachable: the config above is complete
	}
	return s
}

// NewServer returns the gateway handler.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Backend == nil || cfg.Auth == nil {
		return nil, errors.New("gateway: Backend and Auth are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.DefaultLimit == (RateLimit{}) {
		cfg.DefaultLimit = DefaultRateLimit
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = MaxBodyBytes
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.StreamKeepAlive <= 0 {
		cfg.StreamKeepAlive = DefaultStreamKeepAlive
	}
	s := &Server{backend: cfg.Backend, auth: cfg.Auth, limits: newLimiters(cfg.DefaultLimit), authFails: newAuthFailures(),
		bodyTimeout: cfg.BodyTimeout, hosts: cfg.AllowedHosts, keepAlive: cfg.StreamKeepAlive, maxBody: cfg.MaxBodyBytes, origins: cfg.OriginPatterns, ui: cfg.UI, log: cfg.Log,
		metrics: cfg.Metrics, gatherer: cfg.MetricsGatherer, tracer: tracing.Tracer(cfg.TracerProvider), nodes: cfg.Nodes, mux: http.NewServeMux()}
	_, s.keyless = cfg.Auth.(Loopback)
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	api := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		s.mux.HandleFunc(pattern, s.guard(styleProtocol, h))
	}
	s.mux.HandleFunc("GET /api/v1/health", s.health)
	api("GET /api/v1/agents", s.agents)
	api("GET /api/v1/version", s.version)
	api("GET /api/v1/ws", s.ws)
	api("POST /api/v1/send", s.send)
	api("POST /api/v1/stop", s.stop)
	api("POST /api/v1/approvals", s.approve)
	api("GET /api/v1/sessions", s.listDialogs) // the list of docs/protocol.md v1; same as GET /api/v1/dialogs
	api("GET /api/v1/sessions/{id}/messages", s.messages)
	api("GET /api/v1/artifacts/{id}", s.artifact)
	s.mux.HandleFunc("POST /api/v1/uploads", s.guardBody(styleProtocol, MaxUploadBytes, true, s.upload))
	api("GET /api/v1/usage", s.usage)
	api("GET /api/v1/runs/{id}", s.runCard)
	api("POST /api/v1/runs/{id}/cancel", s.cancelRun)
	api("GET /api/v1/audit", s.audit)
	api("GET /api/v1/dialogs", s.listDialogs)
	api("GET /api/v1/search", s.search)
	api("GET /api/v1/config/agents/{agent}", s.agentConfig)
	api("PUT /api/v1/config/agents/{agent}", s.updateAgentConfig)
	api("POST /api/v1/dialogs", s.createDialog)
	api("POST /api/v1/dialogs/{dialog}/switch", s.switchDialog)
	api("PATCH /api/v1/dialogs/{dialog}", s.renameDialog)
	api("POST /api/v1/dialogs/{dialog}/archive", s.archiveDialog)
	api("DELETE /api/v1/dialogs/{dialog}", s.deleteDialog)
	api("GET /api/v1/nodes", s.listNodes)
	api("POST /api/v1/nodes/{id}/{decision}", s.decideNode)
	if s.gatherer != nil {
		h := metrics.Handler(s.gatherer)
		s.mux.HandleFunc("GET /metrics", s.guard(styleProtocol, h.ServeHTTP))
	}
	s.mux.HandleFunc("/api/", s.guard(styleProtocol, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint %s %s (see docs/protocol.md)", r.Method, r.URL.Path))
	}))

	oa := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		s.mux.HandleFunc(pattern, s.guard(styleOpenAI, h))
	}
	oa("POST /v1/chat/completions", s.chatCompletions)
	oa("GET /v1/models", s.models)
	oa("GET /v1/models/{model}", s.model)
	oa("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeOpenAIError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "",
			fmt.Sprintf("Unknown request URL: %s %s. PicoBot serves POST /v1/chat/completions and GET /v1/models.", r.Method, r.URL.Path))
	})
	if s.ui != nil {
		// "/" without a method: "GET /" would conflict with the method-less
		// "/api/" and "/v1/" catch-alls above.
		files := http.FileServerFS(s.ui)
		s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
				return
			}
			s.setUICookie(w)
			files.ServeHTTP(w, r)
		})
	}
}

// contentSecurityPolicy is the web UI's: its own scripts, styles and
// images (artifacts included) only, no framing, no plugins, no base or
// form targets elsewhere, so text a model wrote cannot load or send
// anything off the gateway even if it slipped past the UI's escaping.
// The canvas panel may frame its own document (canvasFramePath) and the
// http(s) pages the canvas tool navigates to, which the tool checked
// against the browser's URL policy.
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data: blob:; connect-src 'self'; frame-src 'self' http: https:; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// ServeHTTP implements http.Handler. Every answer says its content type is
// what it declares and may not be framed; the UI also carries its CSP.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.hostAllowed(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, CodeMisdirected,
			"this gateway is not served under the name "+strconv.Quote(r.Host)+"; use localhost or a configured host")
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	switch {
	case r.URL.Path == canvasFramePath:
		h.Set("X-Frame-Options", "SAMEORIGIN")
		h.Set("Content-Security-Policy", canvasFramePolicy)
	case !strings.HasPrefix(r.URL.Path, "/api/") && !strings.HasPrefix(r.URL.Path, "/v1/"):
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
	default:
		h.Set("X-Frame-Options", "DENY")
	}
	s.mux.ServeHTTP(w, r)
}

// errorCode returns the protocol code of err, with notFound for
// store.ErrNotFound and CodeInternal for anything uncoded.
func errorCode(err error, notFound string) string {
	var ce *CodedError
	switch {
	case errors.As(err, &ce):
		return ce.Code
	case errors.Is(err, store.ErrNotFound):
		return notFound
	case errors.Is(err, store.ErrInvalid):
		return CodeBadRequest
	case errors.Is(err, store.ErrNoTenant):
		return CodeForbidden
	}
	return CodeInternal
}

// statusFor is the HTTP status of err with code: the status it carries (a
// model's 4xx passed on), else the code's. A wait it carries goes out as
// Retry-After.
func statusFor(w http.ResponseWriter, err error, code string) int {
	var ce *CodedError
	if errors.As(err, &ce) {
		if ce.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(ce.RetryAfter)))
		}
		if ce.Status >= 400 && ce.Status < 600 {
			return ce.Status
		}
	}
	if st := statusOf[code]; st != 0 {
		return st
	}
	return http.StatusInternalServerError
}

// retryAfterMS is the wait err carries, in milliseconds (0: none).
func retryAfterMS(err error) int64 {
	var ce *CodedError
	if errors.As(err, &ce) && ce.RetryAfter > 0 {
		return ce.RetryAfter.Milliseconds()
	}
	return 0
}

// validChatPart checks an agent name or chat id.
func checkChat(c Chat) error {
	switch {
	case c.Agent == "" || c.ChatID == "":
		return errors.New("agent and chat_id are required")
	case len(c.ChatID) > maxChatIDBytes || len(c.Agent) > maxChatIDBytes ||
		strings.ContainsAny(c.ChatID, ":/\x00\n\r") || strings.ContainsAny(c.Agent, ":/\x00\n\r"):
		return fmt.Errorf("agent and chat_id must not contain ':', '/' or control characters and have at most %d bytes", maxChatIDBytes)
	}
	switch c.Channel {
	case "", ChannelWeb, ChannelOpenAI:
	default:
		return fmt.Errorf("channel %q is not a gateway channel (want %s or %s)", c.Channel, ChannelWeb, ChannelOpenAI)
	}
	return nil
}

func checkDialogID(id string) error {
	if id == "" || len(id) > maxDialogBytes || strings.ContainsAny(id, ":/\x00\n\r\t ") {
		return fmt.Errorf("dialog_id %q is not a dialog id (1 to %d bytes, no ':', '/', spaces or control characters)", id, maxDialogBytes)
	}
	return nil
}

func checkTitle(title string) error {
	t := strings.TrimSpace(title)
	if t == "" || len([]rune(t)) > MaxTitleRunes || strings.ContainsAny(t, "\x00\n\r") {
		return fmt.Errorf("title must have 1 to %d characters on one line", MaxTitleRunes)
	}
	return nil
}
