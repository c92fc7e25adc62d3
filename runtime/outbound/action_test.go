package outbound

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/store"
)

// TestAct runs channel actions on the agent's channels: one API call on the
// platform with the connector's token, nothing recorded; a channel whose
// platform lacks the action, a gateway client channel and an unknown one
// are refused, naming them.
func TestAct(t *testing.T) {
	g := NewWithT(t)
	st := openSQLite(t)
	ctx := store.WithTenant(t.Context(), "team-a")
	w := newWorld(ctx, t, st)

	res, err := w.d.Act(ctx, agentName, "telegram", channel.ActionRequest{Action: channel.ActionPin, ChatID: "555", MessageID: "5"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Summary).To(Equal("pinned message 5"))
	got := w.tg.received()
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].Method).To(Equal("pinChatMessage"))
	g.Expect(got[0].Body).To(MatchJSON(`{"chat_id":"555","message_id":5,"disable_notification":true}`))

	_, err = w.d.Act(ctx, agentName, "tickets", channel.ActionRequest{Action: channel.ActionReact, ChatID: "T-1", MessageID: "1", Emoji: "x"})
	g.Expect(errors.Is(err, channel.ErrUnsupportedAction)).To(BeTrue())
	g.Expect(err).To(MatchError(`channel "tickets" (webhook) does not support action "react"; it supports send`))
	_, err = w.d.Act(ctx, agentName, "web", channel.ActionRequest{Action: channel.ActionRead, ChatID: "alice"})
	g.Expect(errors.Is(err, channel.ErrUnsupportedAction)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring(`channel "web" is the gateway's own client channel, which offers only send`)))
	_, err = w.d.Act(ctx, agentName, "fax", channel.ActionRequest{Action: channel.ActionRead, ChatID: "1"})
	g.Expect(errors.Is(err, ErrUnknownChannel)).To(BeTrue())
	_, err = w.d.Act(t.Context(), agentName, "telegram", channel.ActionRequest{Action: channel.ActionPin, ChatID: "555", MessageID: "5"})
	g.Expect(err).To(MatchError(ContainSubstring(`failed to run action "pin"`)), "no tenant, no action")

	g.Expect(w.tg.received()).To(HaveLen(1), "only the pin reached a platform")
	g.Expect(w.hook.received()).To(BeEmpty())
	dels, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dels).To(BeEmpty(), "an action is not a delivery")
}
