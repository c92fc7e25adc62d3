package approval

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"time"
)

// Outcome is how an approval request ended.
type Outcome string

// Outcomes.
const (
	Approved Outcome = "approved"
	Denied   Outcome = "denied"
	TimedOut Outcome = "timed_out"
)

// codeAlphabet leaves out letters and digits people confuse (0/O, 1/I/L).
const codeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

// codeLen is the length of a request's code: short enough to type on a
// phone, and a request is only answerable in its own chat, while it waits.
const codeLen = 4

// Broker holds the approval requests of running turns until their user
// answers. A request belongs to one chat: only an answer given in that chat
// (through the gateway for that chat, or a message in it) reaches it, so a
// code seen in one chat cannot approve a command in another. One Broker
// serves a runtime (all its chats).
type Broker struct {
	mu      sync.Mutex
	pending map[string]map[string]chan Outcome // chat → code → answer
}

// NewBroker returns a Broker without requests.
func NewBroker() *Broker { return &Broker{pending: map[string]map[string]chan Outcome{}} }

// Ask opens a request in chat, calls notify with its code (to show it to the
// user), and waits for the answer. A request nobody answers within timeout
// is TimedOut, which callers treat as a denial; the error is ctx's when the
// turn ends first (a /stop).
func (b *Broker) Ask(ctx context.Context, chat string, timeout time.Duration, notify func(code string)) (Outcome, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	code, answer := b.open(chat)
	defer b.close(chat, code)
	notify(code)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case o := <-answer:
		return o, nil
	case <-t.C:
		return TimedOut, nil
	case <-ctx.Done():
		return Denied, ctx.Err()
	}
}

// Answer gives the user's answer to the request of chat with code
// (case-insensitive); false when chat has no such request waiting (it was
// answered, timed out, or never existed).
func (b *Broker) Answer(chat, code string, approve bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.pending[chat][strings.ToUpper(strings.TrimSpace(code))]
	if !ok {
		return false
	}
	o := Denied
	if approve {
		o = Approved
	}
	select {
	case ch <- o:
		return true
	default:
		return false // answered already
	}
}

func (b *Broker) open(chat string) (string, chan Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	reqs := b.pending[chat]
	if reqs == nil {
		reqs = map[string]chan Outcome{}
		b.pending[chat] = reqs
	}
	for {
		code := newCode()
		if _, taken := reqs[code]; !taken {
			ch := make(chan Outcome, 1)
			reqs[code] = ch
			return code, ch
		}
	}
}

func (b *Broker) close(chat, code string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending[chat], code)
	if len(b.pending[chat]) == 0 {
		delete(b.pending, chat)
	}
}

func newCode() string {
	var buf [codeLen]byte
	_, _ = rand.Read(buf[:])
	for i, c := range buf {
		buf[i] = codeAlphabet[int(c)%len(codeAlphabet)]
	}
	return string(buf[:])
}

// Chat-message commands that answer a request: "/approve K7Q2", "/deny K7Q2".
const (
	CommandApprove = "approve"
	CommandDeny    = "deny"
)

// CommandOf is the chat command of an answer (CommandApprove or
// CommandDeny).
func CommandOf(approve bool) string {
	if approve {
		return CommandApprove
	}
	return CommandDeny
}

// ParseAnswer reads a chat message that answers a request: "/approve CODE"
// or "/deny CODE" (any case, surrounding spaces ignored). ok is false for
// any other text.
func ParseAnswer(text string) (code string, approve, ok bool) {
	f := strings.Fields(text)
	if len(f) != 2 || !strings.HasPrefix(f[0], "/") {
		return "", false, false
	}
	switch strings.ToLower(f[0][1:]) {
	case CommandApprove:
		approve = true
	case CommandDeny:
	default:
		return "", false, false
	}
	code = strings.ToUpper(f[1])
	if len(code) != codeLen || strings.Trim(code, codeAlphabet) != "" {
		return "", false, false
	}
	return code, approve, true
}

// Prompt is the chat message that asks the user about a request (chat
// platforms, which have no buttons).
func Prompt(code, tool, command, reason string, timeout time.Duration) string {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return "Approval needed: the agent wants to run (" + tool + ")\n\n" + command + "\n\n" + reason +
		".\nReply /approve " + code + " to run it or /deny " + code + " to refuse; without an answer within " +
		timeout.String() + " it is refused."
}
