package channel

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// The Telegram Bot API client is hand-written: it is a handful of JSON and
// multipart POSTs, and the Go libraries for it are either unmaintained since
// 2021 (go-telegram-bot-api) or not served by our module proxy.

const (
	telegramAPI = "https://api.telegram.org"
	// Telegram's limits: message text and media captions, in UTF-16 units.
	telegramTextLimit    = 4096
	telegramCaptionLimit = 1024
	// maxInboundFile caps a fetched inbound file (the Bot API serves at most 20 MB).
	maxInboundFile = 20 << 20
	// HeaderTelegramSecret carries the webhook secret_token.
	HeaderTelegramSecret = "X-Telegram-Bot-Api-Secret-Token"
)

type telegram struct {
	buildEnv
	base, token, secret string
	// hookURL, when set, is registered with setWebhook at start.
	hookURL     string
	pollTimeout time.Duration
}

func newTelegram(env buildEnv, base, token, secret, hookURL string, pollTimeout time.Duration) hosted {
	if base == "" {
		base = telegramAPI
	}
	t := &telegram{buildEnv: env, base: strings.TrimRight(base, "/"), token: token, secret: secret, pollTimeout: pollTimeout}
	h := hosted{Channel: t, run: t}
	if secret != "" {
		// Webhook mode; it registers itself only when a public URL is known.
		h.recv = t
		t.hookURL = hookURL
		if hookURL == "" {
			h.run = nil
		}
	}
	return h
}

func (t *telegram) Name() string                      { return t.name }
func (t *telegram) Type() picobotv1alpha1.ChannelType { return TypeTelegram }

// tgUpdate is the part of a Telegram Update we read.
type tgUpdate struct {
	UpdateID int64      `json:"update_id"`
	Message  *tgMessage `json:"message"`
}

type tgMessage struct {
	MessageID int64 `json:"message_id"`
	From      *struct {
		ID        int64  `json:"id"`
		IsBot     bool   `json:"is_bot"`
		FirstName string `json:"first_name"`
		LastName  string `json:"last_name"`
		Username  string `json:"username"`
	} `json:"from"`
	Chat struct {
		ID int64 `json:"id"`
	} `json:"chat"`
	Date    int64  `json:"date"`
	Text    string `json:"text"`
	Caption string `json:"caption"`
	Photo   []struct {
		FileID   string `json:"file_id"`
		FileSize int64  `json:"file_size"`
	} `json:"photo"`
	Document *struct {
		FileID   string `json:"file_id"`
		FileName string `json:"file_name"`
		MimeType string `json:"mime_type"`
		FileSize int64  `json:"file_size"`
	} `json:"document"`
}

// tgAnswer is the envelope of every Bot API answer.
type tgAnswer struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

func (t *telegram) receive(r *http.Request, body []byte) (hookReply, error) {
	got := r.Header.Get(HeaderTelegramSecret)
	if got == "" {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "missing %s header", HeaderTelegramSecret)
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(t.secret)) != 1 {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "wrong %s", HeaderTelegramSecret)
	}
	ev, ok, err := parseTelegramUpdate(body, t.name)
	if err != nil {
		return hookReply{}, err
	}
	if !ok {
		return hookReply{}, nil
	}
	return hookReply{events: []event{ev}}, nil
}

// parseTelegramUpdate reads one Update. ok is false for updates that carry
// no user message (edits, member changes, bot messages): they are
// acknowledged and dropped.
func parseTelegramUpdate(body []byte, name string) (event, bool, error) {
	var u tgUpdate
	if err := json.Unmarshal(body, &u); err != nil {
		return event{}, false, refuse(http.StatusBadRequest, CodeMalformed, "update is not valid JSON: %v", err)
	}
	if u.UpdateID <= 0 {
		return event{}, false, refuse(http.StatusBadRequest, CodeBadRequest, "update has no update_id")
	}
	m := u.Message
	if m == nil || m.From == nil || m.From.IsBot {
		return event{}, false, nil
	}
	if m.MessageID <= 0 || m.Chat.ID == 0 {
		return event{}, false, refuse(http.StatusBadRequest, CodeBadRequest, "message of update %d lacks message_id or chat.id", u.UpdateID)
	}
	chat, msgID := strconv.FormatInt(m.Chat.ID, 10), strconv.FormatInt(m.MessageID, 10)
	in := Inbound{Channel: name, Type: TypeTelegram, ChatID: chat, MessageID: msgID,
		Sender: strconv.FormatInt(m.From.ID, 10), SenderName: m.From.Username,
		Text: m.Text, Time: time.Unix(m.Date, 0).UTC()}
	if in.SenderName == "" {
		in.SenderName = strings.TrimSpace(m.From.FirstName + " " + m.From.LastName)
	}
	if in.Text == "" {
		in.Text = m.Caption
	}
	if n := len(m.Photo); n > 0 { // sizes ascending: the last is the largest
		p := m.Photo[n-1]
		in.Files = append(in.Files, File{Name: "photo.jpg", MediaType: "image/jpeg", Size: p.FileSize, Ref: p.FileID})
	}
	if d := m.Document; d != nil {
		in.Files = append(in.Files, File{Name: d.FileName, MediaType: d.MimeType, Size: d.FileSize, Ref: d.FileID})
	}
	if in.Text == "" && len(in.Files) == 0 {
		return event{}, false, nil // stickers, locations, service messages
	}
	return event{keys: []string{"u:" + strconv.FormatInt(u.UpdateID, 10), "m:" + chat + ":" + msgID}, in: in}, true, nil
}

// call invokes a Bot API method with a JSON or multipart body and decodes
// its result into out (when not nil).
func (t *telegram) call(ctx context.Context, method string, body io.Reader, contentType string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/bot"+t.token+"/"+method, body)
	if err != nil {
		return fmt.Errorf("failed to build telegram %s request: %w", method, err)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := do(t.hc, req)
	if err != nil {
		return err
	}
	var a tgAnswer
	if err := json.Unmarshal(res.body, &a); err != nil {
		if res.status >= 300 {
			return statusError(res.status, res.header, "", fmt.Sprintf("telegram %s answered %q", method, truncate(string(res.body), 200)))
		}
		return &SendError{Err: fmt.Errorf("telegram %s answered invalid JSON: %w", method, err)}
	}
	if !a.OK {
		status := a.ErrorCode
		if status == 0 {
			status = res.status
		}
		se := statusError(status, res.header, strconv.Itoa(a.ErrorCode), fmt.Sprintf("telegram %s: %s", method, a.Description))
		if a.Parameters != nil && a.Parameters.RetryAfter > 0 {
			se.Transient, se.RetryAfter = true, time.Duration(a.Parameters.RetryAfter)*time.Second
		}
		return se
	}
	if out != nil {
		if err := json.Unmarshal(a.Result, out); err != nil {
			return &SendError{Err: fmt.Errorf("telegram %s answered an unexpected result: %w", method, err)}
		}
	}
	return nil
}

func (t *telegram) callJSON(ctx context.Context, method string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("failed to encode telegram %s request: %w", method, err)
	}
	return t.call(ctx, method, bytes.NewReader(b), "application/json", out)
}

// Send implements Channel: the text (in chunks of 4096), then each file as a
// photo or a document. A single file takes a short text as its caption.
func (t *telegram) Send(ctx context.Context, out Outbound) (Receipt, error) {
	var parts []part
	caption := ""
	chunks := splitText(out.Text, telegramTextLimit)
	if len(out.Files) == 1 && len(chunks) == 1 && len(splitText(out.Text, telegramCaptionLimit)) == 1 {
		caption, chunks = out.Text, nil
	}
	type sent struct {
		MessageID int64 `json:"message_id"`
	}
	for _, c := range chunks {
		parts = append(parts, func(ctx context.Context) (string, error) {
			var r sent
			err := t.callJSON(ctx, "sendMessage", map[string]any{"chat_id": out.ChatID, "text": c}, &r)
			return strconv.FormatInt(r.MessageID, 10), err
		})
	}
	for _, f := range out.Files {
		parts = append(parts, func(ctx context.Context) (string, error) {
			method, field := "sendDocument", "document"
			if isPhoto(f.MediaType) {
				method, field = "sendPhoto", "photo"
			}
			fields := [][2]string{{"chat_id", out.ChatID}}
			if caption != "" {
				fields = append(fields, [2]string{"caption", caption})
			}
			body, ct, err := multipartBody(fields, &formFile{field: field, file: f})
			if err != nil {
				return "", err
			}
			var r sent
			err = t.call(ctx, method, body, ct, &r)
			return strconv.FormatInt(r.MessageID, 10), err
		})
	}
	if len(parts) == 0 {
		return Receipt{}, &SendError{Channel: t.name, Err: fmt.Errorf("nothing to send: the message has no text and no files")}
	}
	return sendParts(ctx, t.name, out.FromPart, parts)
}

// Fetch implements Fetcher: getFile, then the file download URL.
func (t *telegram) Fetch(ctx context.Context, f File) ([]byte, error) {
	var info struct {
		FilePath string `json:"file_path"`
		FileSize int64  `json:"file_size"`
	}
	if err := t.callJSON(ctx, "getFile", map[string]string{"file_id": f.Ref}, &info); err != nil {
		return nil, fmt.Errorf("failed to locate telegram file %q: %w", f.Ref, err)
	}
	if info.FileSize > maxInboundFile {
		return nil, fmt.Errorf("telegram file %q has %d bytes, more than the %d byte limit", f.Ref, info.FileSize, maxInboundFile)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/file/bot"+t.token+"/"+info.FilePath, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build telegram download request: %w", err)
	}
	res, err := doLimit(t.hc, req, maxInboundFile)
	if err != nil {
		return nil, fmt.Errorf("failed to download telegram file %q: %w", f.Ref, err)
	}
	if res.status != http.StatusOK {
		return nil, fmt.Errorf("failed to download telegram file %q: %w", f.Ref, statusError(res.status, res.header, "", "download refused"))
	}
	return res.body, nil
}

// run registers the webhook (webhook mode with a public URL) or long-polls
// getUpdates (polling mode) until ctx ends.
func (t *telegram) run(ctx context.Context, deliver func(context.Context, event) error) {
	if t.secret != "" {
		t.retry(ctx, "register webhook", func() error {
			return t.callJSON(ctx, "setWebhook", map[string]any{"url": t.hookURL, "secret_token": t.secret,
				"allowed_updates": []string{"message"}}, nil)
		})
		return
	}
	// getUpdates is refused while a webhook is set.
	if !t.retry(ctx, "delete webhook", func() error {
		return t.callJSON(ctx, "deleteWebhook", map[string]any{"drop_pending_updates": false}, nil)
	}) {
		return
	}
	var offset int64
	fails := 0
	for ctx.Err() == nil {
		var updates []json.RawMessage
		err := t.callJSON(ctx, "getUpdates", map[string]any{"offset": offset,
			"timeout": int(t.pollTimeout / time.Second), "allowed_updates": []string{"message"}}, &updates)
		if err == nil {
			offset, err = t.handleUpdates(ctx, updates, offset, deliver)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fails++
			t.log.Error("Telegram polling failed", "err", err, "failures", fails)
			if !sleep(ctx, t.clock, backoff(fails, RetryAfter(err))) {
				return
			}
			continue
		}
		fails = 0
	}
}

// handleUpdates hands on a batch in order and returns the offset that
// confirms what was handed on; it stops at the first failure, so the
// failed update comes again with the next getUpdates.
func (t *telegram) handleUpdates(ctx context.Context, updates []json.RawMessage, offset int64, deliver func(context.Context, event) error) (int64, error) {
	for _, raw := range updates {
		var head struct {
			UpdateID int64 `json:"update_id"`
		}
		_ = json.Unmarshal(raw, &head)
		ev, ok, err := parseTelegramUpdate(raw, t.name)
		if err != nil {
			t.log.Error("Dropping malformed telegram update", "update_id", head.UpdateID, "err", err)
		} else if ok {
			if err := deliver(ctx, ev); err != nil && !isDuplicate(err) {
				return offset, err
			}
		}
		if head.UpdateID >= offset {
			offset = head.UpdateID + 1
		}
	}
	return offset, nil
}

// retry runs fn until it succeeds (true) or ctx ends (false).
func (t *telegram) retry(ctx context.Context, what string, fn func() error) bool {
	for fails := 1; ; fails++ {
		err := fn()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		t.log.Error("Telegram call failed", "call", what, "err", err, "failures", fails)
		if !sleep(ctx, t.clock, backoff(fails, RetryAfter(err))) {
			return false
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
