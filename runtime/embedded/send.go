package embedded

import (
	"context"
	"fmt"
	"slices"

	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// sender implements sessions.Sender for the runtime: a turn of
// sessions_send's exchange is a message queued on the session's chat
// stream, like a gateway message (so it waits for the turn in progress and
// is answered once), whose outcome it waits for the way Handle does. Its
// reply is stored, not delivered: only the announce step's reply goes to a
// chat platform.
type sender struct{ r *Runtime }

var _ sessions.Sender = sender{}

// chat returns the tenant agent and chat of a stored session.
func (s sender) chat(ctx context.Context, sessionID string) (*tenantAgent, sessionrt.Chat, session.ID, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return nil, sessionrt.Chat{}, session.ID{}, err
	}
	sess, err := s.r.state.Store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, sessionrt.Chat{}, session.ID{}, fmt.Errorf("failed to get session %q: %w", sessionID, err)
	}
	a := s.r.agents[sess.Agent]
	if a == nil || a.byTenant[tenant] == nil {
		return nil, sessionrt.Chat{}, session.ID{}, fmt.Errorf("session %q belongs to agent %q, which does not run here", sessionID, sess.Agent)
	}
	id, err := session.ParseID(sessionID)
	if err != nil {
		return nil, sessionrt.Chat{}, session.ID{}, err
	}
	return a.byTenant[tenant], sessionrt.Chat{Channel: id.Channel, Key: id.ChatID}, id, nil
}

// Turn implements sessions.Sender.
func (s sender) Turn(ctx context.Context, sessionID, msgID, text string) (string, error) {
	ta, chat, id, err := s.chat(ctx, sessionID)
	if err != nil {
		return "", err
	}
	key := ta.waiterKey(chat, msgID)
	w, first, err := s.r.await(key, nil)
	if err != nil {
		return "", err
	}
	defer s.r.leave(key, w)
	if first {
		// In the session's own dialog, even if the chat moved on to another.
		if err := s.r.queue(ctx, ta, chat, protocol.Inbound{ID: msgID, Channel: chat.Channel, ChatKey: chat.Key, DialogID: id.DialogID, Text: text}); err != nil {
			w.finish(result{err: err})
		}
	}
	out, err := w.wait(ctx, s.r.ctx, !first)
	if err != nil {
		return "", err
	}
	return out.Text, nil
}

// Announce implements sessions.Sender: a chat platform's chat gets the
// announcement through the outbound dispatcher; a web or terminal chat
// already shows it (the announce step's stored reply).
func (s sender) Announce(ctx context.Context, sessionID, text string) error {
	ta, chat, _, err := s.chat(ctx, sessionID)
	if err != nil {
		return err
	}
	if slices.Contains(protocol.PushChannels(), chat.Channel) || chat.Channel == protocol.ChannelDelegate {
		return nil
	}
	s.r.mu.Lock()
	disp := s.r.disp
	s.r.mu.Unlock()
	if disp == nil {
		return fmt.Errorf("chat platform channels are not served, so chat %s:%s cannot get the announcement", chat.Channel, chat.Key)
	}
	_, err = disp.Deliver(ctx, outbound.Message{Agent: ta.agent, Target: chat.Channel + ":" + chat.Key, Text: text, Origin: sessionID, Stored: true})
	return err
}
