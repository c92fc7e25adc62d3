// Package channel connects agents to chat platforms — Telegram, Feishu/Lark,
// Slack and a generic signed HTTP webhook. Channels only send and receive:
// they verify and parse what a platform pushes (or, for Telegram without a
// public URL, poll for it), hand each new message to a callback, and send
// outbound messages through the platform's API, saying whether a failure is
// worth retrying. They know nothing of sessions or models; the gateway turns
// an Inbound into a session message and the outbound dispatcher decides when
// to retry a Send.
//
// A Manager holds the channels of every agent it is told about (from the
// Agent's spec.channels and their Secrets) and serves their webhooks at
// /hooks/{tenant}/{agent}/{channel}.
package channel

import (
	"context"
	"errors"
	"fmt"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// Channel types served by a Manager. Web and terminal channels are gateway
// clients and have no Channel: the gateway delivers to them itself.
const (
	TypeWeb      picobotv1alpha1.ChannelType = "web"
	TypeTerminal picobotv1alpha1.ChannelType = "terminal"
	TypeTelegram picobotv1alpha1.ChannelType = "telegram"
	TypeFeishu   picobotv1alpha1.ChannelType = "feishu"
	TypeSlack    picobotv1alpha1.ChannelType = "slack"
	TypeWebhook  picobotv1alpha1.ChannelType = "webhook"
)

// Secret keys each channel type reads from the Secret its spec names.
const (
	KeyTelegramToken         = "token"
	KeyTelegramWebhookSecret = "webhookSecret"
	KeyFeishuAppID           = "appID"
	KeyFeishuAppSecret       = "appSecret"
	KeyFeishuVerifyToken     = "verificationToken"
	KeyFeishuEncryptKey      = "encryptKey"
	KeySlackBotToken         = "botToken"
	KeySlackSigningSecret    = "signingSecret"
	KeyWebhookSigningSecret  = "signingSecret"
	// KeyWebhookURL is where the generic webhook channel POSTs outbound
	// messages; without it the channel only receives.
	KeyWebhookURL = "url"
)

// File is an attachment. Outbound files carry Data; inbound files carry the
// platform's reference (Ref) and whatever metadata the platform sent, and
// their bytes are fetched on demand (see Fetcher).
type File struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type,omitempty"`
	Size      int64  `json:"size,omitempty"`
	// Ref is the platform's id of an inbound file (Telegram file_id, Slack
	// file id, Feishu image_key/file_key).
	Ref  string `json:"ref,omitempty"`
	Data []byte `json:"-"`
}

// Inbound is a message a user sent on a platform, verified and de-duplicated.
type Inbound struct {
	// Channel is the channel's name in the Agent spec.
	Channel string                      `json:"channel"`
	Type    picobotv1alpha1.ChannelType `json:"type"`
	// ChatID identifies the conversation on the platform (Telegram chat id,
	// Slack channel id, Feishu chat_id): where a reply goes.
	ChatID string `json:"chat_id"`
	// MessageID is the platform's id of the message, unique within the chat;
	// a redelivery carries the same one.
	MessageID string `json:"message_id"`
	// Sender identifies the author on the platform (user id).
	Sender string `json:"sender,omitempty"`
	// SenderName is a display name when the platform sends one.
	SenderName string    `json:"sender_name,omitempty"`
	Text       string    `json:"text"`
	Files      []File    `json:"files,omitempty"`
	Time       time.Time `json:"time"`
}

// Outbound is a message to send to a chat.
type Outbound struct {
	ChatID string
	Text   string
	Files  []File
	// FromPart skips the first parts of the message (text chunks, then
	// files, in that order) that an earlier attempt already delivered; see
	// SendError.Parts.
	FromPart int
}

// Receipt is what the platform answered to a delivered message.
type Receipt struct {
	// MessageIDs are the platform's ids of the messages sent (a long text or
	// attachments become several).
	MessageIDs []string
}

// Channel is one configured connection to a chat platform.
type Channel interface {
	// Name is the channel's name in the Agent spec.
	Name() string
	Type() picobotv1alpha1.ChannelType
	// Send delivers a message. A failure is a *SendError saying whether a
	// retry may succeed (Transient), when to retry (RetryAfter) and how many
	// parts were delivered before it failed (Parts).
	Send(ctx context.Context, out Outbound) (Receipt, error)
}

// Fetcher is implemented by channels that can download an inbound File.
type Fetcher interface {
	Fetch(ctx context.Context, f File) ([]byte, error)
}

// SendError is a failed Send.
type SendError struct {
	Channel string
	// Transient: the platform may accept the same message later (rate
	// limit, server error, network trouble). Permanent errors (unknown
	// chat, revoked token, rejected content) will fail again.
	Transient bool
	// RetryAfter is how long the platform asked to wait; 0 when it did not say.
	RetryAfter time.Duration
	// Code is the platform's error code or name, when it gave one.
	Code string
	// Parts counts the parts of the message delivered before the failure:
	// a retry sets Outbound.FromPart past them instead of repeating them.
	Parts int
	Err   error
}

func (e *SendError) Error() string {
	kind := "permanent"
	if e.Transient {
		kind = "transient"
	}
	msg := "failed to send ("
	if e.Channel != "" {
		msg = fmt.Sprintf("failed to send on channel %q (", e.Channel)
	}
	msg += kind
	if e.Code != "" {
		msg += ", " + e.Code
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(", retry after %s", e.RetryAfter)
	}
	return msg + "): " + e.Err.Error()
}

func (e *SendError) Unwrap() error { return e.Err }

// IsTransient reports whether err is a SendError worth retrying.
func IsTransient(err error) bool {
	var se *SendError
	return errors.As(err, &se) && se.Transient
}

// RetryAfter returns the wait a platform asked for, 0 when none.
func RetryAfter(err error) time.Duration {
	var se *SendError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}

// PartsSent returns how many parts a failed Send delivered.
func PartsSent(err error) int {
	var se *SendError
	if errors.As(err, &se) {
		return se.Parts
	}
	return 0
}
