package outbound

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadTarget means the target is not "<channel>:<chat_id>[:<dialog_id>]",
// or names a dialog that does not exist.
var ErrBadTarget = errors.New("bad target")

// Target is where a message goes: a channel of the sending agent, a chat on
// it and optionally a dialog of that chat (the chat's current dialog when
// empty).
type Target struct {
	Channel, ChatID, DialogID string
}

// maxTargetBytes bounds a target, like session ids.
const maxTargetBytes = 500

// ParseTarget reads "<channel>:<chat_id>" or "<channel>:<chat_id>:<dialog_id>".
// With two or more colons the part after the last is the dialog, so a chat
// id that contains ':' needs its dialog spelled out.
func ParseTarget(s string) (Target, error) {
	s = strings.TrimSpace(s)
	bad := func(why string) (Target, error) {
		return Target{}, fmt.Errorf("%w %q: %s; want <channel>:<chat_id> or <channel>:<chat_id>:<dialog_id>", ErrBadTarget, s, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case len(s) > maxTargetBytes:
		return Target{}, fmt.Errorf("%w: longer than %d bytes", ErrBadTarget, maxTargetBytes)
	case strings.ContainsAny(s, "\x00\r\n\t"):
		return bad("control characters")
	}
	first := strings.IndexByte(s, ':')
	if first <= 0 {
		return bad("no channel")
	}
	t := Target{Channel: s[:first], ChatID: s[first+1:]}
	if last := strings.LastIndexByte(t.ChatID, ':'); last >= 0 {
		t.ChatID, t.DialogID = t.ChatID[:last], t.ChatID[last+1:]
		if t.DialogID == "" {
			return bad("empty dialog id")
		}
	}
	if t.ChatID == "" {
		return bad("no chat id")
	}
	return t, nil
}

func (t Target) String() string {
	if t.DialogID == "" {
		return t.Channel + ":" + t.ChatID
	}
	return t.Channel + ":" + t.ChatID + ":" + t.DialogID
}
