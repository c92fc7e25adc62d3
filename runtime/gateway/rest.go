package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/picobot/picobot/runtime/buildinfo"
	"github.com/picobot/picobot/runtime/metrics"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/quota"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/turn"
)

// errStyle is the error body shape of an endpoint family.
type errStyle int

const (
	styleProtocol errStyle = iota // {"v":1,"error":{"code","message"}}
	styleOpenAI                   // {"error":{"message","type","param","code"}}
)

// guard authenticates a request, applies its key's rate limit and the body
// size limit, and scopes its context to the principal's tenant.
func (s *Server) guard(style errStyle, next func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return s.guardBody(style, 0, false, next)
}

// guardBody is guard with a body limit of its own (maxBody; the server's
// when 0) and, when binary, a body of any type but those a web page may
// send across sites (browserSafe): uploads.
func (s *Server) guardBody(style errStyle, maxBody int64, binary bool, next func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	if maxBody <= 0 {
		maxBody = s.maxBody
	}
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(code, msg string) {
			if style == styleOpenAI {
				writeOpenAIErrorCode(w, code, msg)
				return
			}
			writeError(w, statusOf[code], code, msg)
		}
		if !s.browserSafe(r, binary, fail) {
			return
		}
		p, ok := s.authenticate(w, r, style, fail)
		if !ok {
			return
		}
		if ok, wait := s.limits.allow(p); !ok {
			s.metrics.RateLimited(metrics.RateLimitKey)
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
			fail(CodeRateLimited, fmt.Sprintf("rate limit of this API key exceeded; retry in %s", wait.Round(time.Millisecond)))
			return
		}
		if r.ContentLength > maxBody {
			fail(CodeTooLarge, fmt.Sprintf("request body is %d bytes; the limit is %d", r.ContentLength, maxBody))
			return
		}
		if !s.readBody(w, r, maxBody, fail) {
			return
		}
		next(w, r.WithContext(WithPrincipal(store.WithTenant(r.Context(), p.Tenant), p)))
	}
}

// authenticate resolves r to its principal. A client address that failed
// too often is refused before its key is looked at.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, style errStyle, fail func(code, msg string)) (Principal, bool) {
	if blocked, wait := s.authFails.blocked(r); blocked {
		s.metrics.RateLimited(metrics.RateLimitAuthFailures)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
		fail(CodeRateLimited, fmt.Sprintf("too many failed authentications from this address; retry in %s", wait.Round(time.Second)))
		return Principal{}, false
	}
	p, err := s.principal(r, bearer(r, style == styleProtocol), true)
	if err != nil {
		fail(CodeUnauthorized, "missing or wrong API key: send Authorization: Bearer <key>")
		return Principal{}, false
	}
	return p, true
}

// principal authenticates r with token. When count is set, a refused key is
// logged (address and path, never key material) and counted against r's
// address.
func (s *Server) principal(r *http.Request, token string, count bool) (Principal, error) {
	p, err := s.auth.Authenticate(r, token)
	if err == nil && p.Tenant == "" {
		err = errors.New("authenticator returned a principal without a tenant")
	}
	switch {
	case err == nil:
		return p, nil
	case !errors.Is(err, ErrUnauthorized):
		s.log.Error("Failed to authenticate request", "path", r.URL.Path, "err", err)
	case count:
		s.metrics.AuthFailure()
		s.authFails.fail(r)
		s.log.Warn("Authentication failed", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
			"key_sent", token != "", "reason", err.Error())
	}
	return Principal{}, err
}

// readBody reads a request's body whole, within the body timeout, so a
// client cannot hold a connection (and a handler) by sending it slowly; the
// handler then reads it from memory. WebSocket upgrades have no body.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, maxBody int64, fail func(code, msg string)) bool {
	if r.Body == nil || r.Body == http.NoBody || strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return true
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.bodyTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		fail(CodeTooLarge, fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit))
		return false
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		fail(CodeTimeout, fmt.Sprintf("request body not received within %s", s.bodyTimeout))
		return false
	case err != nil:
		w.Header().Set("Connection", "close")
		fail(CodeBadRequest, "failed to read request body")
		return false
	}
	// Only now: after a failure the expired deadline also ends the
	// server's attempt to drain what is left of the body.
	_ = rc.SetReadDeadline(time.Time{})
	r.Body = io.NopCloser(bytes.NewReader(data))
	return true
}

func retryAfterSeconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

func writeJSON(w http.ResponseWriter, status int, v map[string]any) {
	v["v"] = ProtocolVersion
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// fail answers a backend error; notFound is the code of store.ErrNotFound.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error, notFound string) {
	code := errorCode(err, notFound)
	if code == CodeInternal {
		s.log.Error("Request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, statusFor(w, err, code), code, protocol.ClientMessage(code, err))
}

// decode reads a JSON body into v. A missing body decodes nothing when
// optional. It answers the error itself and reports false on failure.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	data, err := io.ReadAll(r.Body) // in memory: guard read it within the size and time limits
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "failed to read request body: "+err.Error())
		return false
	case len(bytes.TrimSpace(data)) == 0 && optional:
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "request body is not the expected JSON: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "request body holds more than one JSON value")
		return false
	}
	return true
}

// health answers every caller ok or degraded (a required check failed);
// only an authenticated one also gets the report (it names paths,
// providers and models): ok, the groups of checks by kind, and every check
// in one list with its kind. A wrong key counts as a failed authentication
// like anywhere else.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	rep := s.backend.Health(r.Context())
	status := "ok"
	if !rep.OK {
		status = "degraded"
	}
	body := map[string]any{"status": status}
	if s.healthDetails(r) {
		body["ok"] = rep.OK
		body["groups"] = rep.Groups
		body["checks"] = rep.Checks()
	}
	writeJSON(w, http.StatusOK, body)
}

// healthDetails reports whether r may see the health checks.
func (s *Server) healthDetails(r *http.Request) bool {
	if blocked, _ := s.authFails.blocked(r); blocked {
		return false
	}
	token := bearer(r, true)
	_, err := s.principal(r, token, token != "") // a probe without a key is no failed login
	return err == nil
}

// version says which build serves (for `picobot version --url`); behind
// the key, as it tells an attacker which fixes the server lacks.
func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	b := buildinfo.Read()
	writeJSON(w, http.StatusOK, map[string]any{"version": b.Version, "revision": b.Revision, "time": b.Time,
		"modified": b.Modified, "go": b.Go})
}

func (s *Server) agents(w http.ResponseWriter, r *http.Request) {
	list, err := s.backend.ListAgents(r.Context())
	if err != nil {
		s.fail(w, r, err, CodeNotFound)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": list})
}

// sendRequest is the body of POST /api/v1/send.
type sendRequest struct {
	ID     string `json:"id"`
	Agent  string `json:"agent"`
	ChatID string `json:"chat_id"`
	Text   string `json:"text"`
	// Files are ids of uploads of the chat (POST /api/v1/uploads).
	Files []string `json:"files,omitempty"`
}

// send runs a message to the end and answers with its final reply.
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	var req sendRequest
	if !decode(w, r, &req, false) {
		return
	}
	if req.ID == "" {
		req.ID = newRequestID("r-")
	}
	f := frame{ID: req.ID, Agent: req.Agent, ChatID: req.ChatID, Text: req.Text, Files: req.Files}
	if msg := validateSend(f); msg != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, msg)
		return
	}
	files := &finalFiles{}
	ctx, span := s.startTurn(r.Context(), r.Header, tracing.SpanHTTPSend, req.Agent, req.ChatID)
	defer span.End()
	attached, err := s.sendFiles(ctx, Chat{Channel: ChannelWeb, Agent: req.Agent, ChatID: req.ChatID}, req.Files)
	var out Outcome
	if err == nil {
		out, err = s.backend.Handle(ctx, Send{ID: req.ID, Channel: ChannelWeb, Agent: req.Agent, ChatID: req.ChatID, Text: req.Text,
			Files: attached, Sink: files.sink})
	}
	if err != nil {
		code := errorCode(err, CodeUnknownSession)
		if code == CodeInternal {
			s.log.ErrorContext(ctx, "Turn failed", "agent", req.Agent, "session", out.SessionID, "err", err)
		}
		tracing.Fail(span, err)
		writeJSON(w, statusFor(w, err, code), map[string]any{"id": req.ID, "session": out.SessionID,
			"error": map[string]string{"code": code, "message": protocol.ClientMessage(code, err)}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": req.ID, "session": out.SessionID, "command": out.Command,
		"text": out.Text, "duplicate": out.Duplicate, "failed": out.Failed, "attachments": files.list()})
}

// finalFiles keeps the attachments of a turn's final event, for answers
// that are not streamed; its sink is called from the turn's goroutine.
type finalFiles struct {
	mu    sync.Mutex
	files []turn.Attachment
}

func (f *finalFiles) sink(e turn.Event) {
	if e.Kind == turn.EventFinal {
		f.mu.Lock()
		f.files = e.Attachments
		f.mu.Unlock()
	}
}

// list returns the attachments as clients see them (an empty list when
// none).
func (f *finalFiles) list() []Attachment {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.files) == 0 {
		return []Attachment{}
	}
	return toAttachments(f.files)
}

// markdown returns the attachments as markdown links, "" when none.
func (f *finalFiles) markdown() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.files) == 0 {
		return ""
	}
	refs := make([]turn.Attachment, len(f.files))
	for i, a := range f.files {
		a.URL = artifactURL(a)
		refs[i] = a
	}
	return turn.AttachmentsMarkdown(refs)
}

func newRequestID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// stopRequest is the body of POST /api/v1/stop.
type stopRequest struct {
	Agent  string `json:"agent"`
	ChatID string `json:"chat_id"`
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var req stopRequest
	if !decode(w, r, &req, false) {
		return
	}
	c := Chat{Channel: ChannelWeb, Agent: req.Agent, ChatID: req.ChatID}
	if err := checkChat(c); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	stopped, err := s.backend.Stop(r.Context(), c)
	if err != nil {
		s.fail(w, r, err, CodeUnknownSession)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stopped": stopped})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	last := defaultHistory
	if v := r.URL.Query().Get("last"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHistoryLimit {
			writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("last must be a number from 1 to %d", maxHistoryLimit))
			return
		}
		last = n
	}
	msgs, err := s.backend.Messages(r.Context(), r.PathValue("id"), last)
	if err != nil {
		s.fail(w, r, err, CodeUnknownSession)
		return
	}
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		o := map[string]any{"seq": m.Seq, "role": m.Role, "content": m.Content, "tool_calls": m.ToolCalls,
			"tool_call_id": m.ToolCallID, "name": m.Name, "is_error": m.IsError, "created_at": m.CreatedAt}
		if in, err := strconv.Atoi(m.Meta[store.MetaTokensIn]); err == nil {
			outTokens, _ := strconv.Atoi(m.Meta[store.MetaTokensOut])
			o["usage"] = map[string]int{"input_tokens": in, "output_tokens": outTokens}
		}
		if code := m.Meta[store.MetaErrorCode]; code != "" {
			o["error"] = map[string]string{"code": code, "message": m.Meta[store.MetaError]}
		}
		out = append(out, o)
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out})
}

// maxUsageDays bounds the range GET /api/v1/usage lists.
const maxUsageDays = 366

// usage answers GET /api/v1/usage?from=&to=&agent=: the tenant's model use
// per agent and UTC day (this month when no range is given), and its
// totals of today and this month, with costs in the price table's
// currency.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := time.Now().UTC()
	f := store.UsageFilter{Agent: q.Get("agent"), From: time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC), To: now}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.DateOnly, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s must be a date as YYYY-MM-DD, got %q", p.name, v))
				return
			}
			*p.to = t
		}
	}
	switch {
	case f.To.Before(f.From):
		writeError(w, http.StatusBadRequest, CodeBadRequest, "from must not be after to")
		return
	case f.To.Sub(f.From) > maxUsageDays*24*time.Hour:
		writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("the range may span at most %d days", maxUsageDays))
		return
	case len(f.Agent) > maxChatIDBytes:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "agent name too long")
		return
	}
	days, totals, err := s.backend.Usage(r.Context(), f)
	if err != nil {
		s.fail(w, r, err, CodeNotFound)
		return
	}
	out := make([]map[string]any, 0, len(days))
	for _, d := range days {
		o := usageJSON(d.UsageCounts)
		o["agent"], o["day"] = d.Agent, d.Day.Format(time.DateOnly)
		out = append(out, o)
	}
	writeJSON(w, http.StatusOK, map[string]any{"from": f.From.Format(time.DateOnly), "to": f.To.Format(time.DateOnly), "days": out,
		"today": usageJSON(totals.Day), "month": usageJSON(totals.Month)})
}

// usageJSON is counts as the API shows them: cost also as a decimal
// string of the currency ("12.35", rounded up to the cent).
func usageJSON(c store.UsageCounts) map[string]any {
	return map[string]any{"input_tokens": c.InputTokens, "output_tokens": c.OutputTokens, "cost_micros": c.CostMicros,
		"cost": quota.Money(c.CostMicros), "model_calls": c.ModelCalls, "turns": c.Turns, "tool_calls": c.ToolCalls, "sessions": c.Sessions}
}

// artifact serves a stored file. Only images and plain text render inline;
// everything else downloads, and nothing may run script in the UI's origin.
func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || len(id) > maxIDBytes || strings.ContainsAny(id, "/\\\x00") {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "not an artifact id")
		return
	}
	rc, a, err := s.backend.Artifact(r.Context(), id)
	if err != nil {
		s.fail(w, r, err, CodeUnknownArtifact)
		return
	}
	defer func() { _ = rc.Close() }()
	ct := a.MediaType
	disposition := "attachment"
	switch {
	case strings.HasPrefix(ct, "image/") && ct != "image/svg+xml":
		disposition = "inline"
	case strings.HasPrefix(ct, "text/"):
		ct, disposition = "text/plain; charset=utf-8", "inline"
	case ct == "":
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", fmt.Sprintf("%s; filename=%q", disposition, a.Name))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	w.Header().Set("Content-Length", strconv.FormatInt(a.Size, 10))
	_, _ = io.Copy(w, rc)
}

// Dialog is a dialog as clients see it.
type Dialog struct {
	// ID is the session id.
	ID            string    `json:"id"`
	DialogID      string    `json:"dialog_id"`
	Title         string    `json:"title"`
	CreatedAt     time.Time `json:"created_at"`
	LastMessageAt time.Time `json:"last_message_at"`
	Archived      bool      `json:"archived"`
}

func toDialog(s store.Session) Dialog {
	return Dialog{ID: s.ID, DialogID: s.DialogID, Title: s.Title, CreatedAt: s.CreatedAt, LastMessageAt: s.LastMessageAt, Archived: s.ArchivedAt != nil}
}

func toDialogs(list []store.Session) []Dialog {
	out := make([]Dialog, 0, len(list))
	for _, s := range list {
		out = append(out, toDialog(s))
	}
	return out
}

// chatOf reads the chat of a dialog request from its query (?agent=&chat_id=,
// optionally &channel=).
func chatOf(w http.ResponseWriter, r *http.Request) (Chat, bool) {
	q := r.URL.Query()
	c := Chat{Channel: q.Get("channel"), Agent: q.Get("agent"), ChatID: q.Get("chat_id")}
	if err := checkChat(c); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return Chat{}, false
	}
	return c, true
}

// dialogOf reads the chat and the {dialog} path value.
func dialogOf(w http.ResponseWriter, r *http.Request) (Chat, string, bool) {
	c, ok := chatOf(w, r)
	if !ok {
		return Chat{}, "", false
	}
	id := r.PathValue("dialog")
	if err := checkDialogID(id); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return Chat{}, "", false
	}
	return c, id, true
}

func (s *Server) listDialogs(w http.ResponseWriter, r *http.Request) {
	c, ok := chatOf(w, r)
	if !ok {
		return
	}
	cur, list, err := s.backend.Dialogs(r.Context(), c)
	if err != nil {
		s.fail(w, r, err, CodeUnknownDialog)
		return
	}
	// "sessions" is the name of docs/protocol.md v1's list; "dialogs" the
	// same list under the control channel's name.
	d := toDialogs(list)
	writeJSON(w, http.StatusOK, map[string]any{"current": cur, "dialogs": d, "sessions": d})
}

type titleBody struct {
	Title string `json:"title"`
}

func (s *Server) createDialog(w http.ResponseWriter, r *http.Request) {
	c, ok := chatOf(w, r)
	if !ok {
		return
	}
	var body titleBody
	if !decode(w, r, &body, true) {
		return
	}
	if body.Title != "" {
		if err := checkTitle(body.Title); err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
			return
		}
	}
	d, err := s.backend.CreateDialog(r.Context(), c, body.Title)
	if err != nil {
		s.fail(w, r, err, CodeUnknownDialog)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"dialog": toDialog(d), "current": d.DialogID})
}

// dialogOp runs an operation on the {dialog} of a request and answers with
// the dialog (and the chat's current dialog when current is set).
func (s *Server) dialogOp(w http.ResponseWriter, r *http.Request, current bool,
	op func(ctx context.Context, c Chat, id string) (store.Session, error)) {
	c, id, ok := dialogOf(w, r)
	if !ok {
		return
	}
	d, err := op(r.Context(), c, id)
	if err != nil {
		s.fail(w, r, err, CodeUnknownDialog)
		return
	}
	out := map[string]any{"dialog": toDialog(d)}
	if current {
		out["current"] = d.DialogID
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) switchDialog(w http.ResponseWriter, r *http.Request) {
	s.dialogOp(w, r, true, s.backend.SwitchDialog)
}

func (s *Server) archiveDialog(w http.ResponseWriter, r *http.Request) {
	s.dialogOp(w, r, false, s.backend.ArchiveDialog)
}

func (s *Server) renameDialog(w http.ResponseWriter, r *http.Request) {
	var body titleBody
	if !decode(w, r, &body, false) {
		return
	}
	if err := checkTitle(body.Title); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	s.dialogOp(w, r, false, func(ctx context.Context, c Chat, id string) (store.Session, error) {
		return s.backend.RenameDialog(ctx, c, id, strings.TrimSpace(body.Title))
	})
}

func (s *Server) deleteDialog(w http.ResponseWriter, r *http.Request) {
	c, id, ok := dialogOf(w, r)
	if !ok {
		return
	}
	if err := s.backend.DeleteDialog(r.Context(), c, id); err != nil {
		s.fail(w, r, err, CodeUnknownDialog)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": id})
}
