package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
)

// receiver is implemented by channels that accept pushed events (webhooks).
type receiver interface {
	// receive verifies and parses a request whose body was read. A refusal
	// is a *hookError.
	receive(r *http.Request, body []byte) (hookReply, error)
}

// runner is implemented by channels with background work (Telegram long
// polling and webhook registration). run returns when ctx ends.
type runner interface {
	run(ctx context.Context, deliver func(context.Context, event) error)
}

// hookReply is what a receiver made of a request.
type hookReply struct {
	// body is the JSON answer the platform expects (a URL-verification
	// challenge); nil answers {"ok":true}.
	body   any
	events []event
}

// event is one inbound message with the ids that identify a redelivery of
// it (the platform's event or update id, and its message id).
type event struct {
	keys []string
	in   Inbound
}

// hookError is a refused webhook request; it becomes a 4xx JSON answer.
type hookError struct {
	status    int
	code, msg string
}

func (e *hookError) Error() string { return e.code + ": " + e.msg }

func refuse(status int, code, format string, args ...any) *hookError {
	return &hookError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// Webhook error codes, in the "code" of the JSON error answer.
const (
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnknownTenant    = "unknown_tenant"
	CodeUnknownAgent     = "unknown_agent"
	CodeUnknownChannel   = "unknown_channel"
	CodeWebhookDisabled  = "webhook_disabled"
	CodeTooLarge         = "body_too_large"
	CodeMalformed        = "malformed"
	CodeBadRequest       = "bad_request"
	CodeBadSignature     = "bad_signature"
	CodeStaleTimestamp   = "stale_timestamp"
	CodeBadToken         = "bad_token"
	CodeInProgress       = "in_progress"
	CodeUnavailable      = "unavailable"
)

var (
	errDuplicate = errors.New("duplicate message")
	errInFlight  = errors.New("the same message is being handled by another request")
)

// Handler serves the agents' webhooks at /hooks/{tenant}/{agent}/{channel}.
// Mount it at "/hooks/" of the gateway; it does its own authentication
// (each platform's signature or token).
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/{tenant}/{agent}/{channel}", m.serveHook)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeHookError(w, refuse(http.StatusNotFound, CodeUnknownChannel, "no webhook at %s; webhooks are at /hooks/{tenant}/{agent}/{channel}", r.URL.Path))
	})
	return mux
}

func (m *Manager) serveHook(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeHookError(w, refuse(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "webhooks accept POST only"))
		return
	}
	key := agentKey{r.PathValue("tenant"), r.PathValue("agent")}
	name := r.PathValue("channel")
	h, herr := m.hookTarget(key, name)
	if herr != nil {
		writeHookError(w, herr)
		return
	}
	if r.ContentLength > MaxBodyBytes {
		writeHookError(w, refuse(http.StatusRequestEntityTooLarge, CodeTooLarge, "body of %d bytes exceeds the %d byte limit", r.ContentLength, MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeHookError(w, refuse(http.StatusRequestEntityTooLarge, CodeTooLarge, "body exceeds the %d byte limit", MaxBodyBytes))
			return
		}
		writeHookError(w, refuse(http.StatusBadRequest, CodeMalformed, "failed to read body: %v", err))
		return
	}
	reply, err := h.recv.receive(r, body)
	if err != nil {
		var he *hookError
		if !errors.As(err, &he) {
			he = refuse(http.StatusBadRequest, CodeMalformed, "%v", err)
		}
		m.log.Info("Refused webhook request", "tenant", key.tenant, "agent", key.agent, "channel", name, "code", he.code, "reason", he.msg)
		writeHookError(w, he)
		return
	}
	duplicates := 0
	for _, ev := range reply.events {
		switch err := m.handOn(r.Context(), key, name, ev); {
		case err == nil:
		case errors.Is(err, errDuplicate):
			duplicates++
		case errors.Is(err, errInFlight):
			writeHookError(w, refuse(http.StatusConflict, CodeInProgress, "%v; retry later", err))
			return
		default:
			m.log.Error("Failed to hand on inbound message", "tenant", key.tenant, "agent", key.agent, "channel", name, "err", err)
			w.Header().Set("Retry-After", "5")
			writeHookError(w, refuse(http.StatusServiceUnavailable, CodeUnavailable, "the message could not be queued; retry later"))
			return
		}
	}
	out := reply.body
	if out == nil {
		ok := map[string]any{"ok": true}
		if duplicates > 0 {
			ok["duplicate"] = true
		}
		out = ok
	}
	writeJSON(w, http.StatusOK, out)
}

// hookTarget finds the channel a webhook request is for.
func (m *Manager) hookTarget(key agentKey, name string) (hosted, *hookError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.agents[key]
	if set == nil {
		for k := range m.agents {
			if k.tenant == key.tenant {
				return hosted{}, refuse(http.StatusNotFound, CodeUnknownAgent, "no agent %q with channels in tenant %q", key.agent, key.tenant)
			}
		}
		return hosted{}, refuse(http.StatusNotFound, CodeUnknownTenant, "no tenant %q with channels", key.tenant)
	}
	h, ok := set.channels[name]
	if !ok {
		return hosted{}, refuse(http.StatusNotFound, CodeUnknownChannel, "agent %q has no usable channel %q", key.agent, name)
	}
	if h.recv == nil {
		return hosted{}, refuse(http.StatusNotFound, CodeWebhookDisabled, "channel %q does not take webhooks (it polls, or has no webhook secret configured)", name)
	}
	return h, nil
}

// handOn gives one inbound message to OnInbound unless it was handed on
// before (errDuplicate) or is being handed on right now (errInFlight). The
// message counts as seen only once OnInbound succeeded, so a failure lets
// the platform's redelivery through.
func (m *Manager) handOn(ctx context.Context, key agentKey, name string, ev event) error {
	scoped := make([]string, len(ev.keys))
	for i, k := range ev.keys {
		scoped[i] = key.tenant + "/" + key.agent + "/" + name + "/" + k
	}
	m.mu.Lock()
	for _, k := range scoped {
		if m.dedup.Seen(k) {
			m.mu.Unlock()
			return errDuplicate
		}
		if _, busy := m.inflight[k]; busy {
			m.mu.Unlock()
			return errInFlight
		}
	}
	for _, k := range scoped {
		m.inflight[k] = struct{}{}
	}
	m.mu.Unlock()

	// A message from a chat platform starts its turn's trace.
	ctx, span := m.tracer.Start(ctx, tracing.SpanInbound, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		tracing.AttrTenant.String(key.tenant), tracing.AttrAgent.String(key.agent), tracing.AttrChannel.String(name),
		tracing.AttrChannelType.String(string(ev.in.Type))))
	err := m.opts.OnInbound(store.WithTenant(ctx, key.tenant), key.agent, ev.in)
	tracing.Fail(span, err)
	span.End()

	m.mu.Lock()
	for _, k := range scoped {
		delete(m.inflight, k)
	}
	if err == nil {
		m.dedup.Mark(scoped...)
	}
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("failed to hand on message %q of chat %q: %w", ev.in.MessageID, ev.in.ChatID, err)
	}
	return nil
}

func writeHookError(w http.ResponseWriter, e *hookError) {
	writeJSON(w, e.status, map[string]any{"error": map[string]string{"code": e.code, "message": e.msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
