package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// turnsOn are the message ids queued on a chat stream of agent since the
// last call, and their texts.
func (f *fixture) turnsOn(t *testing.T, agent, channel, chat string) (ids, texts []string) {
	t.Helper()
	for _, m := range f.streamMessages(t, chatStream(f.tenant, agent, channel, chat)) {
		in, err := protocol.DecodeInbound(m.Payload)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		ids, texts = append(ids, m.ID), append(texts, in.Text)
	}
	return ids, texts
}

// TestExchangesMoveOncePerTurn drives a sessions_send exchange the way
// session pods do, on real Redis as the tenant's own ACL user: Start stores it, queues its first turn
// in the target's chat (with a wake) and hands the caller the outcome the
// target chat's event channel carries; each answered turn moves it once
// and queues the next (a duplicate answer, or the answer of a turn that is
// not the current one, moves nothing); a reply goes back to the requester,
// the announce step to the target; RunWatch's Check queues again the turn
// of an exchange that has not moved and whose chat has no runtime, not one
// whose chat has; a turn that did not run moves nothing; and only the
// announce step's reply reaches a chat platform.
func TestExchangesMoveOncePerTurn(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), f.tenant)
	// As in a session pod: logged in as the tenant's own Redis user, whose
	// ACL allows only some command categories on the tenant's keys.
	tb := tenantBus(t, f.rdb, f.tenant)
	x := &Exchanges{Tenant: f.tenant, Bus: tb, Redis: tb.Client(), Log: slog.New(slog.DiscardHandler)}
	rc := &RunCompletion{Store: f.store, Exchanges: x, Log: slog.New(slog.DiscardHandler)}
	ex := sessions.Exchange{ID: sessions.ExchangePrefix + "x1", Requester: "web:lc:default", RequesterAgent: "lead",
		Target: "telegram:42:d2", TargetAgent: "helper", Message: "status?", MaxTurns: 1, RequesterCanListen: true}
	started, err := x.Start(ctx, ex)
	g.Expect(err).NotTo(HaveOccurred())
	defer started.Stop()
	ids, texts := f.turnsOn(t, "helper", "telegram", "42")
	g.Expect(ids).To(Equal([]string{"a2a:x1:1"}))
	g.Expect(texts[0]).To(HavePrefix("[Message from agent lead, session web:lc:default"))
	g.Expect(f.wakesOf(t, "helper")).To(Equal([]string{"42"}))

	// The target's pod answers: the caller gets the reply.
	c := sessionrt.Chat{Channel: "telegram", Key: "42"}
	g.Expect(signals{f.rdb}.publish(ctx, eventChannel(f.tenant, "helper", c.Channel, c.Key),
		protocol.Frame{MessageID: "a2a:x1:1", Kind: protocol.FrameDone, Outcome: &protocol.Outcome{Text: "half done"}})).To(Succeed())
	g.Eventually(started.First, 10*time.Second).Should(Receive(Equal(sessions.StepResult{Reply: "half done"})))

	rc.Done(ctx, c, "a2a:x1:1", protocol.Outcome{}, &protocol.CodedError{Code: protocol.CodeBusy, Err: context.Canceled})
	ids, _ = f.turnsOn(t, "lead", "web", "lc")
	g.Expect(ids).To(BeEmpty(), "a turn that did not run moves nothing")
	g.Expect(rc.Silent("a2a:x1:1", protocol.Outcome{Text: "half done"})).To(BeTrue(), "only the announce step posts to the chat")
	rc.Done(ctx, c, "a2a:x1:1", protocol.Outcome{Text: "half done"}, nil)
	ids, texts = f.turnsOn(t, "lead", "web", "lc")
	g.Expect(ids).To(Equal([]string{"a2a:x1:2"}))
	g.Expect(texts[0]).To(And(HavePrefix("[Reply from agent helper"), ContainSubstring("half done")))
	g.Expect(f.wakesOf(t, "lead")).To(Equal([]string{"lc"}))
	rc.Done(ctx, c, "a2a:x1:1", protocol.Outcome{Text: "half done", Duplicate: true}, nil)
	ids, _ = f.turnsOn(t, "lead", "web", "lc")
	g.Expect(ids).To(BeEmpty(), "a duplicate answer moves nothing")

	// RunWatch: the reply's chat has a runtime, so nothing is queued;
	// without one, the turn is queued again with a wake.
	g.Expect(signals{f.rdb}.setOwner(ctx, ownerKey(f.tenant, "lead", "web", "lc"), "pod-1", time.Minute)).To(Succeed())
	g.Expect(x.Check(ctx, 0)).To(Succeed())
	ids, _ = f.turnsOn(t, "lead", "web", "lc")
	g.Expect(ids).To(BeEmpty(), "its chat has a runtime")
	g.Expect(f.rdb.Del(ctx, ownerKey(f.tenant, "lead", "web", "lc")).Err()).To(Succeed())
	g.Expect(x.Check(ctx, time.Hour)).To(Succeed())
	ids, _ = f.turnsOn(t, "lead", "web", "lc")
	g.Expect(ids).To(BeEmpty(), "it moved less than the grace ago")
	g.Expect(x.Check(ctx, 0)).To(Succeed())
	ids, _ = f.turnsOn(t, "lead", "web", "lc")
	g.Expect(ids).To(Equal([]string{"a2a:x1:2"}))

	// The requester's reply ends the ping-pong (maxPingPongTurns 1): the
	// announce step runs in the target's chat, and its reply goes to the
	// chat platform unless it is ANNOUNCE_SKIP.
	rc.Done(ctx, sessionrt.Chat{Channel: "web", Key: "lc"}, "a2a:x1:2", protocol.Outcome{Text: "thanks"}, nil)
	ids, texts = f.turnsOn(t, "helper", "telegram", "42")
	g.Expect(ids).To(Equal([]string{"a2a:x1" + sessions.AnnounceSuffix}))
	g.Expect(texts[0]).To(And(ContainSubstring("Your first reply:\nhalf done"), ContainSubstring("Latest reply:\nthanks")))
	g.Expect(rc.Silent("a2a:x1:announce", protocol.Outcome{Text: "It is half done"})).To(BeFalse())
	g.Expect(rc.Silent("a2a:x1:announce", protocol.Outcome{Text: sessions.AnnounceSkip})).To(BeTrue())
	rc.Done(ctx, c, "a2a:x1:2", protocol.Outcome{Text: "thanks"}, nil)
	ids, _ = f.turnsOn(t, "helper", "telegram", "42")
	g.Expect(ids).To(BeEmpty(), "an answer of a turn that is no longer current moves nothing")

	rc.Done(ctx, c, "a2a:x1:announce", protocol.Outcome{Text: "It is half done"}, nil)
	n, err := f.rdb.Exists(ctx, exchangeKey(f.tenant, "a2a:x1")).Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero(), "an ended exchange leaves nothing behind")
	g.Expect(f.rdb.HKeys(ctx, exchangesKey(f.tenant)).Val()).To(BeEmpty())
	g.Expect(x.Check(ctx, 0)).To(Succeed())
	for _, a := range []string{"helper", "lead"} {
		ids, _ = f.turnsOn(t, a, map[string]string{"helper": "telegram", "lead": "web"}[a], map[string]string{"helper": "42", "lead": "lc"}[a])
		g.Expect(ids).To(BeEmpty())
	}
}

// TestExchangeStateFirstTurnFails: a first turn that failed ends the
// exchange (no ping-pong, no announce step); a failed reply goes to the
// announce step.
func TestExchangeStateFirstTurnFails(t *testing.T) {
	g := NewWithT(t)
	ex := sessions.Exchange{ID: "a2a:x", Requester: "web:a:d", Target: "web:b:d", MaxTurns: 3, RequesterCanListen: true}
	s := sessions.NewExchangeState(ex)
	s.Advance("", true)
	g.Expect(s.Done).To(BeTrue())
	s = sessions.NewExchangeState(ex)
	s.Advance("first", false)
	g.Expect(s.Current().Session).To(Equal("web:a:d"))
	s.Advance("", true)
	g.Expect(s.Current()).To(And(HaveField("Announce", true), HaveField("Session", "web:b:d"), HaveField("MsgID", "a2a:x:announce")))
	s.Advance("told", false)
	g.Expect(s.Done).To(BeTrue())
}
