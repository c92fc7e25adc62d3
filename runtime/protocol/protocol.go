// Package protocol is the contract shared by PicoBot's gateway, its session
// runtimes and its clients: the error codes of the client protocol
// (docs/protocol.md), how a message ended (Outcome), the channel names and
// which of them are the gateway's own clients, and the wire format of a queued
// chat message. It is a leaf: it imports nothing of PicoBot but the bus's key
// helper, so the gateway, runtime/sessionrt, both modes and runtime/client use
// one definition.
package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/llm"
)

// Channels whose chats are the gateway's own clients, and the channel of
// scheduled runs. Every other channel is a chat platform (Telegram, Slack,
// Feishu/Lark, webhooks), named by the Agent's spec.channels.
const (
	// ChannelWeb carries WebSocket and REST clients (the web UI).
	ChannelWeb = "web"
	// ChannelOpenAI carries the OpenAI-compatible chat completions endpoint.
	ChannelOpenAI = "openai"
	// ChannelTerminal carries `picobot chat` and the TUI.
	ChannelTerminal = "terminal"
	// ChannelCron carries scheduled runs.
	ChannelCron = "cron"
	// ChannelDelegate carries delegated runs: each a fresh session of the
	// sub-agent whose answer goes back to the delegating turn.
	ChannelDelegate = "delegate"
	// ChannelStateless names the OpenAI endpoint's stateless turns: their
	// scratch workspaces, and in cluster mode the pseudo-chat whose event
	// channel carries a turn's frames.
	ChannelStateless = "stateless"
)

// GatewayClient reports whether the messages of a channel come from the
// gateway's own clients or from scheduled runs: their answers go back as the
// turn's events to the waiting call (and, for runs, by the job's delivery
// policy). The answer to a chat platform's message goes out as a message of
// its own, through the outbound dispatcher that holds the platform's
// credentials. This is the one place that decides it.
func GatewayClient(channel string) bool {
	switch channel {
	case ChannelWeb, ChannelOpenAI, ChannelTerminal, ChannelCron, ChannelDelegate, ChannelStateless:
		return true
	}
	return false
}

// PushChannels are the gateway client channels that keep a connection open
// and so can be sent a message they did not ask for (send_message, a
// scheduled run's delivery): the web UI and the terminal. OpenAI clients only
// get answers to their requests.
func PushChannels() []string { return []string{ChannelWeb, ChannelTerminal} }

// ChatKey is the chat id sessions know a chat by. On the gateway's client
// channels a chat belongs to the client and is "<agent>/<chat_id>"; on a chat
// platform's channel (which belongs to one agent) it is the platform's chat id
// alone, so replies and send_message targets name the chat the way the
// platform does.
func ChatKey(channel, agent, chatID string) string {
	switch channel {
	case ChannelWeb, ChannelOpenAI, ChannelTerminal:
		return agent + "/" + chatID
	}
	return chatID
}

// Chat is a client's conversation with an agent on one channel; it has
// dialogs, one of them current. Its sessions are
// "<channel>:<Key()>:<dialog_id>".
type Chat struct {
	// Channel is the chat's channel; empty means ChannelWeb.
	Channel string
	Agent   string
	ChatID  string
}

// Key is the chat id sessions know the chat by (ChatKey).
func (c Chat) Key() string { return ChatKey(c.ChannelName(), c.Agent, c.ChatID) }

// ChannelName is the chat's channel, ChannelWeb when unset.
func (c Chat) ChannelName() string {
	if c.Channel == "" {
		return ChannelWeb
	}
	return c.Channel
}

// SessionID is the id of one of the chat's dialogs.
func (c Chat) SessionID(dialogID string) string {
	return c.ChannelName() + ":" + c.Key() + ":" + dialogID
}

// ChatStream is the bus stream of one chat's inbound messages, read in order by
// the runtime that owns the chat (consumer group ChatGroup).
func ChatStream(tenant, agent, channel, chatKey string) string {
	return bus.Key(tenant, agent, "chat", channel, chatKey)
}

// ChatGroup is the consumer group of chat streams.
const ChatGroup = "runtime"

// AgentInfo is an agent as clients see it.
type AgentInfo struct {
	Name    string     `json:"name"`
	Ready   bool       `json:"ready"`
	Reason  string     `json:"reason"`
	Message string     `json:"message"`
	Model   *ModelInfo `json:"model"`
	Tools   []string   `json:"tools"`
}

// ModelInfo is an agent's effective model.
type ModelInfo struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Source   string `json:"source"`
}

// Error codes of the protocol.
const (
	CodeBadRequest       = "bad_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeUnknownAgent     = "unknown_agent"
	CodeUnknownSession   = "unknown_session"
	CodeUnknownDialog    = "unknown_dialog"
	CodeUnknownArtifact  = "unknown_artifact"
	CodeBusy             = "busy"
	CodeStopped          = "stopped"
	CodeTooLarge         = "too_large"
	CodeTimeout          = "timeout"                // the request body did not arrive in time
	CodeUnsupportedMedia = "unsupported_media_type" // a request body that is not JSON
	CodeMisdirected      = "misdirected"            // a Host that does not name this gateway
	CodeModelRejected    = "model_rejected"         // the model refused the agent's request (its 4xx)
	CodeRateLimited      = "rate_limited"
	CodeNoModel          = "no_model"
	CodeUnavailable      = "unavailable"      // not queued (Redis down); resend with the same id
	CodeDeadLetter       = "dead_letter"      // set aside after too many deliveries (sessionrt.MaxDeliveries)
	CodeUnanswered       = "unanswered"       // a resent message whose turn failed and was overtaken by a later one
	CodeBudgetExhausted  = "budget_exhausted" // the tenant's model budget for the day or month is spent
	CodeSessionLimit     = "session_limit"    // a new session over the tenant's maxConcurrentSessions
	CodeMessageLimit     = "message_limit"    // a message over the tenant's messagesPerMinute
	CodeInternal         = "internal"
)

// CodedError carries a protocol error code.
type CodedError struct {
	Code string
	Err  error
	// Status is the HTTP status to answer with when it is not the code's
	// own (a model's 4xx passed on); 0 otherwise.
	Status int
	// RetryAfter is how long the client should wait before retrying (a
	// model's rate limit); 0 when it says nothing.
	RetryAfter time.Duration
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// Errorf returns a CodedError with a formatted message.
func Errorf(code, format string, args ...any) error {
	return &CodedError{Code: code, Err: fmt.Errorf(format, args...)}
}

// Outcome is how a message ended.
type Outcome struct {
	SessionID string `json:"session_id,omitempty"`
	// Command is the slash command handled ("" for a model turn).
	Command string `json:"command,omitempty"`
	// Text is the command's reply or the turn's final text.
	Text string `json:"text,omitempty"`
	// Duplicate: the message id was processed before; nothing ran again.
	Duplicate bool `json:"duplicate,omitempty"`
	// Failed: the slash command did not do what was asked (Text says why).
	Failed bool `json:"failed,omitempty"`
	// ToolCalls are the calls of a stateless turn's client tools that
	// ended it (the client runs them).
	ToolCalls []llm.ToolCall `json:"tool_calls,omitempty"`
}

// ErrClientToolsRefused is returned (as a bad_request CodedError) when the
// agent declines client tools (spec.tools.clientTools: false).
var ErrClientToolsRefused = errors.New("this agent does not take client tools (its spec.tools.clientTools is false)")

// ErrClientToolClash is returned (as a bad_request CodedError) for a client
// tool named like one of the agent's own tools: the model could not tell
// them apart.
var ErrClientToolClash = errors.New("a client tool has the name of one of the agent's own tools")

// Stateless is a turn on exactly a client's messages, run with nothing
// stored (the OpenAI endpoint's stateless mode): what the gateway asks of
// whichever process runs the agent.
type Stateless struct {
	// System is the client's system and developer messages, appended to the
	// agent's instructions.
	System string `json:"system,omitempty"`
	// Messages are the client's conversation without its system messages;
	// the last one is a user message or a tool result.
	Messages []llm.Message `json:"messages"`
	// Tools are the client's function tools: a model call of one ends the
	// turn with the call (Outcome.ToolCalls).
	Tools []llm.ToolDef `json:"tools,omitempty"`
	// Settings are the client's model settings (nil: the agent's).
	Settings *llm.Settings `json:"settings,omitempty"`
}

// UnmarshalJSON reads an Outcome, also as the session pods before the wire
// format was versioned wrote it (Go field names: encoding/json matches
// "Text", "Command" and "Duplicate" to the tags case-insensitively, but not
// "SessionID" to "session_id"), so a rolling upgrade keeps the session id.
func (o *Outcome) UnmarshalJSON(b []byte) error {
	type plain Outcome
	var v struct {
		plain
		Legacy string `json:"SessionID"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*o = Outcome(v.plain)
	if o.SessionID == "" {
		o.SessionID = v.Legacy
	}
	return nil
}

// ErrUnknownVersion is returned for a wire message of a version this build
// does not speak.
var ErrUnknownVersion = errors.New("unknown wire format version")

// ClientMessage is what a client is told of err, a turn's or a request's
// error with code: internal details stay in the log. The gateway answers
// with it, and the session runtime records it for a failed turn.
func ClientMessage(code string, err error) string {
	switch code {
	case CodeInternal:
		return "internal error"
	case CodeUnknownSession:
		return "no such session"
	case CodeUnknownArtifact:
		var ce *CodedError
		if errors.As(err, &ce) {
			return err.Error() // the gateway's own words (a send naming a file it cannot use)
		}
		return "no such artifact"
	case CodeUnknownDialog:
		var ce *CodedError
		if errors.As(err, &ce) {
			return err.Error()
		}
		return "no such dialog in this chat"
	}
	return redactURLs(err.Error())
}

// urlPattern matches URLs in error text: a backend error may carry a
// model provider's or a store's internal address, which clients are not
// told (the log keeps the whole error).
var urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+`)

func redactURLs(msg string) string { return urlPattern.ReplaceAllString(msg, "<url>") }
