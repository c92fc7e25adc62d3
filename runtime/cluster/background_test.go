package cluster

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
	"github.com/picobot/picobot/runtime/tool/sessions"
)

// backgroundRun records a background run of researcher started by lead in
// session web:<chat>:default, running with its slot reserved.
func (f *fixture) backgroundRun(t *testing.T, id, chat, input string) store.AgentRun {
	t.Helper()
	r, err := f.store.CreateAgentRun(store.WithTenant(context.Background(), f.tenant), store.AgentRun{ID: id, Agent: "researcher",
		SessionID: "web:" + chat + ":default", ParentAgent: "lead", Mode: store.RunBackground, Status: store.RunRunning,
		Completion: store.CompletionReserved, Input: input})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return r
}

// streamMessages reads every message of a stream (a group of the test's
// own, so nothing else's reads change what it sees).
func (f *fixture) streamMessages(t *testing.T, stream string) []bus.Message {
	t.Helper()
	msgs, err := f.bus.Fetch(context.Background(), stream, "test-"+t.Name(), "reader", bus.FetchOptions{Count: 100})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return msgs
}

// wakesOf are the chat keys of the wakes queued for agent since the last
// call.
func (f *fixture) wakesOf(t *testing.T, agent string) []string {
	t.Helper()
	var out []string
	for _, m := range f.streamMessages(t, wakeStream(f.tenant, agent)) {
		var w Wake
		NewWithT(t).Expect(json.Unmarshal(m.Payload, &w)).To(Succeed())
		out = append(out, w.ChatKey)
	}
	return out
}

const runInputJSON = `{"mode":"background","parent_agent":"lead","target":"researcher","task":"find it","tools":["calculator"],"depth":1,"text":"[Task delegated by agent lead]\n\nfind it"}`

// TestRunCompletionEndsARunOnce: the pod answering a background run's
// message records the outcome and queues the continuation in the parent
// chat with a wake of the parent agent; answering it again (a duplicate,
// or a pod that died before acking) changes nothing but queues the same
// continuation again; a turn that did not run records nothing; the
// continuation's answer marks the completion delivered, and an
// ANNOUNCE_SKIP is kept from chat platforms.
func TestRunCompletionEndsARunOnce(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), f.tenant)
	rc := &RunCompletion{Store: f.store, Completions: Continuations{Tenant: f.tenant, Bus: f.bus, Redis: f.rdb}, Log: slog.New(slog.DiscardHandler)}
	run := f.backgroundRun(t, "run-1", "chat1", runInputJSON)
	c := sessionrt.Chat{Channel: protocol.ChannelDelegate, Key: run.ID}

	rc.Done(ctx, c, run.ID, protocol.Outcome{}, &protocol.CodedError{Code: protocol.CodeBusy, Err: context.Canceled})
	got, err := f.store.GetAgentRun(ctx, run.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(store.RunRunning), "a turn that did not run ends nothing")

	rc.Done(ctx, c, run.ID, protocol.Outcome{Text: "found"}, nil)
	got, err = f.store.GetAgentRun(ctx, run.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(store.RunSucceeded))
	g.Expect(got.Result).To(Equal("found"))
	g.Expect(got.Completion).To(Equal(store.CompletionReady))
	parent := chatStream(f.tenant, "lead", "web", "chat1")
	msgs := f.streamMessages(t, parent)
	g.Expect(msgs).To(HaveLen(1))
	g.Expect(msgs[0].ID).To(Equal(delegate.ContinuationID(run.ID)))
	in, err := protocol.DecodeInbound(msgs[0].Payload)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.DialogID).To(Equal("default"))
	g.Expect(in.Text).To(HavePrefix("[Background run run-1 of sub-agent researcher ended: succeeded]"))
	g.Expect(in.Text).To(ContainSubstring("Result:\nfound"))
	g.Expect(f.wakesOf(t, "lead")).To(Equal([]string{"chat1"}))

	// Again, with another outcome: the run ended once.
	rc.Done(ctx, c, run.ID, protocol.Outcome{Text: "something else"}, nil)
	got, err = f.store.GetAgentRun(ctx, run.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Result).To(Equal("found"))
	again := f.streamMessages(t, parent)
	g.Expect(again).To(HaveLen(1))
	g.Expect(again[0].ID).To(Equal(delegate.ContinuationID(run.ID)), "the same continuation, which runs once")

	// A parent chat with a runtime gets no wake.
	g.Expect(f.rdb.Set(ctx, ownerKey(f.tenant, "lead", "web", "chat1"), "pod-a", time.Minute).Err()).To(Succeed())
	rc.Done(ctx, c, run.ID, protocol.Outcome{Text: "found"}, nil)
	g.Expect(f.wakesOf(t, "lead")).To(HaveLen(1), "the earlier duplicate woke; this one did not")

	lead := sessionrt.Chat{Channel: "web", Key: "chat1"}
	rc.Done(ctx, lead, delegate.ContinuationID(run.ID), protocol.Outcome{Text: "I told the user"}, nil)
	got, err = f.store.GetAgentRun(ctx, run.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Completion).To(Equal(store.CompletionDelivered))

	g.Expect(rc.Silent(delegate.ContinuationID(run.ID), protocol.Outcome{Text: " " + sessions.AnnounceSkip + "\n"})).To(BeTrue())
	g.Expect(rc.Silent(delegate.ContinuationID(run.ID), protocol.Outcome{Text: "news"})).To(BeFalse())
	g.Expect(rc.Silent("m1", protocol.Outcome{Text: sessions.AnnounceSkip})).To(BeFalse(), "only a continuation's reply")

	// A foreground run's answer is its waiting caller's: nothing here.
	fg, err := f.store.CreateAgentRun(ctx, store.AgentRun{ID: "run-fg", Agent: "researcher", SessionID: "web:chat2:default",
		ParentAgent: "lead", Mode: store.RunForeground, Status: store.RunRunning})
	g.Expect(err).NotTo(HaveOccurred())
	rc.Done(ctx, sessionrt.Chat{Channel: protocol.ChannelDelegate, Key: fg.ID}, fg.ID, protocol.Outcome{Text: "x"}, nil)
	got, err = f.store.GetAgentRun(ctx, fg.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(store.RunRunning))
}

// TestRunCompletionRecordsAFailedRun: a run whose turn failed ends failed
// with the client's message, and is delivered like a success.
func TestRunCompletionRecordsAFailedRun(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), f.tenant)
	rc := &RunCompletion{Store: f.store, Completions: Continuations{Tenant: f.tenant, Bus: f.bus, Redis: f.rdb}, Log: slog.New(slog.DiscardHandler)}
	run := f.backgroundRun(t, "run-f", "chatf", runInputJSON)
	rc.Done(ctx, sessionrt.Chat{Channel: protocol.ChannelDelegate, Key: run.ID}, run.ID, protocol.Outcome{},
		&protocol.CodedError{Code: protocol.CodeModelRejected, Err: context.DeadlineExceeded})
	got, err := f.store.GetAgentRun(ctx, run.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(store.RunFailed))
	g.Expect(got.Result).NotTo(BeEmpty())
	g.Expect(got.Completion).To(Equal(store.CompletionReady))
	g.Expect(f.streamMessages(t, chatStream(f.tenant, "lead", "web", "chatf"))).To(HaveLen(1))
}

// TestRunWatchWakesWhatNoRuntimeServes: a running background run whose
// chat has no runtime gets a wake, and its task queued again when it never
// reached its stream; one a runtime owns is left alone; a ready completion
// whose parent chat has no runtime has its continuation queued again with a
// wake of the parent.
func TestRunWatchWakesWhatNoRuntimeServes(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), f.tenant)
	lost := f.backgroundRun(t, "run-lost", "c1", runInputJSON)
	owned := f.backgroundRun(t, "run-owned", "c2", runInputJSON)
	g.Expect(f.rdb.Set(ctx, ownerKey(f.tenant, "researcher", protocol.ChannelDelegate, owned.ID), "pod-b", time.Minute).Err()).To(Succeed())
	ready := f.backgroundRun(t, "run-ready", "c3", runInputJSON)
	status, text, slot := store.RunSucceeded, "the answer", store.CompletionReady
	_, err := f.store.UpdateAgentRun(ctx, ready.ID, store.AgentRunUpdate{Status: &status, Result: &text, Completion: &slot, IfActive: true})
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(2 * time.Millisecond) // older than the grace below

	w := &RunWatch{Bus: f.bus, Redis: f.rdb, Store: f.store, Tenants: NewTenantSet(), Grace: time.Millisecond, Log: slog.New(slog.DiscardHandler)}
	g.Expect(w.Check(ctx, f.tenant)).To(Succeed())

	task := f.streamMessages(t, chatStream(f.tenant, "researcher", protocol.ChannelDelegate, lost.ID))
	g.Expect(task).To(HaveLen(1), "the task that never reached its stream")
	in, err := protocol.DecodeInbound(task[0].Payload)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Delegation).NotTo(BeNil())
	g.Expect(*in.Delegation).To(Equal(protocol.Delegation{RunID: lost.ID, ParentAgent: "lead", ParentSession: "web:c1:default", Depth: 1,
		Tools: []string{"calculator"}}))
	g.Expect(in.Text).To(Equal("[Task delegated by agent lead]\n\nfind it"))
	g.Expect(f.wakesOf(t, "researcher")).To(Equal([]string{lost.ID}))
	cont := f.streamMessages(t, chatStream(f.tenant, "lead", "web", "c3"))
	g.Expect(cont).To(HaveLen(1))
	g.Expect(cont[0].ID).To(Equal(delegate.ContinuationID(ready.ID)))
	g.Expect(f.wakesOf(t, "lead")).To(Equal([]string{"c3"}))

	// Again: the task is on its stream now, so only a wake.
	g.Expect(w.Check(ctx, f.tenant)).To(Succeed())
	g.Expect(f.streamMessages(t, chatStream(f.tenant, "researcher", protocol.ChannelDelegate, lost.ID))).To(BeEmpty())
	g.Expect(f.wakesOf(t, "researcher")).To(Equal([]string{lost.ID}))
	g.Expect(f.streamMessages(t, chatStream(f.tenant, "lead", "web", "c3"))).To(HaveExactElements(
		HaveField("ID", delegate.ContinuationID(ready.ID))), "queued again: its id makes it run once")
	g.Expect(f.wakesOf(t, "lead")).To(Equal([]string{"c3"}))

	// Delivered completions and ended runs are nobody's business.
	delivered := store.CompletionDelivered
	_, err = f.store.UpdateAgentRun(ctx, ready.ID, store.AgentRunUpdate{Completion: &delivered})
	g.Expect(err).NotTo(HaveOccurred())
	cancelled, closed := store.RunCancelled, store.CompletionClosed
	_, err = f.store.UpdateAgentRun(ctx, lost.ID, store.AgentRunUpdate{Status: &cancelled, Completion: &closed, IfActive: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.Check(ctx, f.tenant)).To(Succeed())
	g.Expect(f.wakesOf(t, "researcher")).To(BeEmpty())
	g.Expect(f.wakesOf(t, "lead")).To(BeEmpty())
}
