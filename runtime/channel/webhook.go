package channel

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// The generic webhook channel lets any program talk to an agent over HTTP.
// Both directions are signed alike: X-PicoBot-Timestamp is the Unix time in
// seconds and X-PicoBot-Signature is "sha256=" + hex(HMAC-SHA256(secret,
// "<timestamp>.<body>")). A request more than five minutes from now is
// refused as a replay.
//
// Inbound body: {"chat_id": "...", "message_id": "...", "text": "...",
// "sender": "..."} (sender optional). Outbound body: {"chat_id": "...",
// "text": "...", "files": [{"name", "media_type", "data" (base64)}]}; a 2xx
// answer is a delivery and may carry {"message_id": "..."}.

// Generic webhook signature headers.
const (
	HeaderPicoBotTimestamp = "X-PicoBot-Timestamp"
	HeaderPicoBotSignature = "X-PicoBot-Signature"
)

// maxWebhookIDBytes bounds chat and message ids of generic webhook requests.
const maxWebhookIDBytes = 256

type webhook struct {
	buildEnv
	secret, url string
}

func newWebhook(env buildEnv, secret, url string) hosted {
	w := &webhook{buildEnv: env, secret: secret, url: url}
	return hosted{Channel: w, recv: w}
}

func (w *webhook) Name() string                      { return w.name }
func (w *webhook) Type() picobotv1alpha1.ChannelType { return TypeWebhook }

// WebhookSignature is the X-PicoBot-Signature of body sent at timestamp
// (Unix seconds, as sent in X-PicoBot-Timestamp).
func WebhookSignature(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

type webhookInbound struct {
	ChatID    string `json:"chat_id"`
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	Sender    string `json:"sender"`
}

func (w *webhook) receive(r *http.Request, body []byte) (hookReply, error) {
	ts, sig := r.Header.Get(HeaderPicoBotTimestamp), r.Header.Get(HeaderPicoBotSignature)
	if ts == "" || sig == "" {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "missing %s or %s header", HeaderPicoBotTimestamp, HeaderPicoBotSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "%s is not Unix seconds", HeaderPicoBotTimestamp)
	}
	if !hmac.Equal([]byte(strings.ToLower(sig)), []byte(WebhookSignature(w.secret, ts, body))) {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "wrong %s", HeaderPicoBotSignature)
	}
	if d := w.clock.Now().Unix() - sec; d > int64(SignatureWindow.Seconds()) || d < -int64(SignatureWindow.Seconds()) {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeStaleTimestamp, "timestamp is %d s away from now, more than %s: refused as a replay", d, SignatureWindow)
	}
	ev, err := parseWebhookInbound(body, w.name)
	if err != nil {
		return hookReply{}, err
	}
	ev.in.Time = w.clock.Now().UTC()
	return hookReply{events: []event{ev}}, nil
}

// parseWebhookInbound reads a verified generic webhook body.
func parseWebhookInbound(body []byte, name string) (event, error) {
	var in webhookInbound
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return event{}, refuse(http.StatusBadRequest, CodeMalformed, "body is not the expected JSON object {chat_id, message_id, text, sender}: %v", err)
	}
	if dec.More() {
		return event{}, refuse(http.StatusBadRequest, CodeMalformed, "body has data after the JSON object")
	}
	switch {
	case in.ChatID == "" || in.MessageID == "":
		return event{}, refuse(http.StatusBadRequest, CodeBadRequest, "chat_id and message_id are required")
	case strings.TrimSpace(in.Text) == "":
		return event{}, refuse(http.StatusBadRequest, CodeBadRequest, "text is required")
	case len(in.ChatID) > maxWebhookIDBytes || len(in.MessageID) > maxWebhookIDBytes:
		return event{}, refuse(http.StatusBadRequest, CodeBadRequest, "chat_id and message_id are limited to %d bytes", maxWebhookIDBytes)
	case strings.ContainsAny(in.ChatID+in.MessageID, "\x00\r\n"):
		return event{}, refuse(http.StatusBadRequest, CodeBadRequest, "chat_id and message_id must not contain control characters")
	}
	return event{keys: []string{"m:" + in.ChatID + ":" + in.MessageID},
		in: Inbound{Channel: name, Type: TypeWebhook, ChatID: in.ChatID, MessageID: in.MessageID, Sender: in.Sender, Text: in.Text}}, nil
}

type webhookFile struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type,omitempty"`
	Data      []byte `json:"data"`
}

// Send implements Channel: one signed POST to the configured url.
func (w *webhook) Send(ctx context.Context, out Outbound) (Receipt, error) {
	if w.url == "" {
		return Receipt{}, &SendError{Channel: w.name, Code: "no_url",
			Err: fmt.Errorf("channel has no outbound URL: add key %q to its Secret", KeyWebhookURL)}
	}
	if out.FromPart > 0 {
		return Receipt{}, nil // the single part went out already
	}
	files := make([]webhookFile, 0, len(out.Files))
	for _, f := range out.Files {
		files = append(files, webhookFile{Name: safeFileName(f.Name), MediaType: f.MediaType, Data: f.Data})
	}
	body, err := json.Marshal(map[string]any{"chat_id": out.ChatID, "text": out.Text, "files": files})
	if err != nil {
		return Receipt{}, &SendError{Channel: w.name, Err: fmt.Errorf("failed to encode message: %w", err)}
	}
	return sendParts(ctx, w.name, 0, []part{func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
		if err != nil {
			return "", fmt.Errorf("failed to build webhook request: %w", err)
		}
		ts := strconv.FormatInt(w.clock.Now().Unix(), 10)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderPicoBotTimestamp, ts)
		req.Header.Set(HeaderPicoBotSignature, WebhookSignature(w.secret, ts, body))
		res, err := do(w.hc, req)
		if err != nil {
			return "", err
		}
		if res.status < 200 || res.status > 299 {
			return "", statusError(res.status, res.header, "", "webhook receiver answered "+truncate(strings.TrimSpace(string(res.body)), 200))
		}
		// A 2xx is a delivery whatever the body; a JSON one may name the message.
		var a struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(res.body, &a)
		return a.MessageID, nil
	}})
}
