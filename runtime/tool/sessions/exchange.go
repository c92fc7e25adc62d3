package sessions

import (
	"fmt"
	"strconv"
	"strings"
)

// ExchangeState is how far an exchange has come: the turn in progress
// (Step, Current) and what the next ones need. Advance moves it on once
// that turn has answered. It is a value a runtime may store between turns
// (JSON), so that whoever sees a turn answered can queue the next one:
// cluster mode's session pods do, each turn running in its chat's pod.
type ExchangeState struct {
	Exchange
	// Step numbers the turn in progress from 1 (the first turn).
	Step int `json:"step"`
	// Replies counts the ping-pong replies asked for so far.
	Replies int `json:"replies,omitempty"`
	// First is the target's first reply; Latest the latest reply of the
	// ping-pong.
	First  string `json:"first,omitempty"`
	Latest string `json:"latest,omitempty"`
	// Announcing says the turn in progress is the announce step.
	Announcing bool `json:"announcing,omitempty"`
	// Done says the exchange has nothing left to run.
	Done bool `json:"done,omitempty"`
}

// ExchangeTurn is a turn of an exchange: message MsgID with Text in
// Session, of Agent.
type ExchangeTurn struct {
	Step     int
	Session  string
	Agent    string
	MsgID    string
	Text     string
	Announce bool
}

// NewExchangeState is ex before its first turn.
func NewExchangeState(ex Exchange) ExchangeState {
	return ExchangeState{Exchange: ex, Step: 1}
}

// AnnounceSuffix ends the message id of an exchange's announce step.
const AnnounceSuffix = ":announce"

// TurnMsgID is the message id of step n of exchange id (the announce step
// has its own, AnnounceSuffix).
func TurnMsgID(id string, n int, announce bool) string {
	if announce {
		return id + AnnounceSuffix
	}
	return id + ":" + strconv.Itoa(n)
}

// ParseTurnMsgID returns the exchange of a turn's message id, and whether
// the id is one.
func ParseTurnMsgID(msgID string) (id string, announce, ok bool) {
	if !strings.HasPrefix(msgID, ExchangePrefix) {
		return "", false, false
	}
	if id, ok := strings.CutSuffix(msgID, AnnounceSuffix); ok {
		return id, true, true
	}
	i := strings.LastIndexByte(msgID, ':')
	if i <= len(ExchangePrefix) {
		return "", false, false
	}
	if _, err := strconv.Atoi(msgID[i+1:]); err != nil {
		return "", false, false
	}
	return msgID[:i], false, true
}

// Current is the turn in progress.
func (s ExchangeState) Current() ExchangeTurn {
	t := ExchangeTurn{Step: s.Step, Session: s.Target, Agent: s.TargetAgent, MsgID: TurnMsgID(s.ID, s.Step, s.Announcing), Announce: s.Announcing}
	switch {
	case s.Announcing:
		t.Text = fmt.Sprintf("[Announce step of agent-to-agent exchange %s with agent %s]\n\nOriginal message:\n%s\n\n"+
			"Your first reply:\n%s\n\nLatest reply:\n%s\n\nYour reply to this message is posted to your chat's channel; reply exactly %s to stay silent.",
			s.ID, s.RequesterAgent, s.Message, s.First, s.Latest, AnnounceSkip)
	case s.Step == 1:
		t.Text = fmt.Sprintf("[Message from agent %s, session %s, sent with sessions_send]\n\n%s", s.RequesterAgent, s.Requester, s.Message)
	default:
		// Odd replies go back to the requester, even ones to the target.
		i := s.Replies
		from, fromAgent := s.Target, s.TargetAgent
		if i%2 == 1 {
			t.Session, t.Agent = s.Requester, s.RequesterAgent
		} else {
			from, fromAgent = s.Requester, s.RequesterAgent
		}
		t.Text = fmt.Sprintf("[Reply from agent %s, session %s (agent-to-agent exchange %s, reply %d of at most %d)]\n\n%s\n\n"+
			"Reply to continue the exchange, or reply exactly %s to end it.", fromAgent, from, s.ID, i, s.MaxTurns, s.Latest, ReplySkip)
	}
	return t
}

// Advance moves s past the turn in progress, which answered reply (failed:
// it failed). A failed first turn ends the exchange; a failed or skipped
// reply ends the ping-pong, and the announce step follows; the announce
// step ends it.
func (s *ExchangeState) Advance(reply string, failed bool) {
	switch {
	case s.Done:
		return
	case s.Announcing:
		s.Done = true
		return
	case s.Step == 1:
		if failed {
			s.Done = true
			return
		}
		s.First, s.Latest = reply, reply
	default:
		if failed || skip(reply, ReplySkip) {
			s.announce()
			return
		}
		s.Latest = reply
	}
	if s.Replies < s.MaxTurns && s.RequesterCanListen && !skip(s.Latest, ReplySkip) {
		s.Replies++
		s.Step++
		return
	}
	s.announce()
}

func (s *ExchangeState) announce() {
	s.Announcing = true
	s.Step++
}
