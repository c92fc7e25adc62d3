package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
)

// counterTool counts its runs per text; a call with text "block" blocks
// until the turn's context ends (a call in flight when the runtime dies).
type counterTool struct {
	runs    map[string]*atomic.Int32
	blocked chan struct{}
}

func newCounterTool() *counterTool {
	return &counterTool{runs: map[string]*atomic.Int32{"a": {}, "b": {}, "c": {}, "block": {}}, blocked: make(chan struct{}, 8)}
}

func (c *counterTool) tool() tool.Tool {
	return tool.New("count", "Count a run.", func(ctx context.Context, _ tool.Env, a struct {
		Text string `json:"text"`
	}) (tool.Result, error) {
		c.runs[a.Text].Add(1)
		if a.Text == "block" {
			c.blocked <- struct{}{}
			<-ctx.Done()
			return tool.Errorf("error: count was cancelled"), nil
		}
		return tool.Text("counted " + a.Text), nil
	})
}

// withCounter replaces the fixture's tools with the counter tool.
func withCounter(c *counterTool) func(*Config) {
	return func(cfg *Config) {
		reg, err := tool.NewRegistry(c.tool())
		if err != nil {
			panic(err)
		}
		loop := *cfg.Loop
		loop.Tools = reg
		cfg.Loop = &loop
	}
}

func TestACrashedTurnResumesFromItsLastStoredStep(t *testing.T) {
	g := NewWithT(t)
	c := newCounterTool()
	f := newFixture(t, withCounter(c))
	// Step 1 calls a and b; step 2 calls c and block: the runtime "dies"
	// while block runs (its context ends: a shutdown with no grace left).
	f.s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "count", Args: `{"text":"a"}`}, {ID: "c2", Name: "count", Args: `{"text":"b"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c3", Name: "count", Args: `{"text":"c"}`}, {ID: "c4", Name: "count", Args: `{"text":"block"}`}, {ID: "c5", Name: "count", Args: `{"text":"a"}`}}},
	)
	in := Inbound{Channel: "web", ChatID: "u1", MessageID: "m-1", Text: "count things"}
	ctx, die := context.WithCancel(f.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := f.m.Handle(ctx, in)
		errc <- err
	}()
	<-c.blocked
	die()
	err := <-errc
	g.Expect(errors.Is(err, ErrInterrupted)).To(BeTrue(), "%v", err)

	sid := "web:u1:default"
	msgs, err := f.st.LoadMessages(f.ctx, sid, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	// user, step 1 with its two results, step 2 with c's result: block's
	// was cut short, so it is not stored, nor anything after it.
	g.Expect(roles(msgs)).To(Equal([]string{"user", "assistant", "tool", "tool", "assistant", "tool"}))
	g.Expect(msgs[5].Content).To(Equal("counted c"))

	// A new runtime (another process after the crash) gets the message
	// again: it resumes at step 3, never running a, b or c again.
	f2 := &fixture{s: f.s, st: f.st, ctx: f.ctx}
	cfg := f.m.cfg
	cfg.Holder = "pod-b"
	f2.m = NewManager(cfg)
	g.Expect(f.st.ReleaseLease(f.ctx, sid, "pod-a")).To(Succeed())
	f.s.Script(fakellm.Turn{Text: "Counted a, b and c; block was interrupted."})
	r, err := f2.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Duplicate).To(BeFalse())
	g.Expect(r.Text).To(Equal("Counted a, b and c; block was interrupted."))
	g.Expect(r.Output.Steps).To(Equal(3), "steps are numbered on from the stored ones")
	for text, want := range map[string]int32{"a": 1, "b": 1, "c": 1, "block": 1} {
		g.Expect(c.runs[text].Load()).To(Equal(want), "runs of %s", text)
	}

	// The model saw the stored results and the interruption, and the call
	// after block (a, never started) as interrupted too.
	reqs := f.s.Requests()
	last := reqs[len(reqs)-1]
	var results []string
	for _, m := range last.Messages {
		for _, tr := range m.ToolResults {
			results = append(results, tr.Content)
		}
	}
	g.Expect(results).To(HaveLen(5))
	g.Expect(results[:3]).To(Equal([]string{"counted a", "counted b", "counted c"}))
	g.Expect(results[3]).To(Equal(InterruptedResult))
	g.Expect(results[4]).To(Equal(InterruptedResult))

	msgs, err = f.st.LoadMessages(f.ctx, sid, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(roles(msgs)).To(Equal([]string{"user", "assistant", "tool", "tool", "assistant", "tool", "tool", "tool", "assistant"}))
	for i, m := range msgs[1:] {
		g.Expect(m.ID).To(Equal(turnMessageID("m-1", i)), "the turn's messages are numbered in order")
	}

	// Sent once more: the stored answer, nothing runs.
	n := len(f.s.Requests())
	r, err = f2.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Duplicate).To(BeTrue())
	g.Expect(r.Text).To(Equal("Counted a, b and c; block was interrupted."))
	g.Expect(f.s.Requests()).To(HaveLen(n))
}

func TestAMessageSentAgainDuringItsTurnGetsItsAnswer(t *testing.T) {
	g := NewWithT(t)
	c := newCounterTool()
	f := newFixture(t, withCounter(c))
	release := make(chan struct{})
	var calls atomic.Int32
	f.s.Respond(func(req fakellm.Recorded) fakellm.Turn {
		if calls.Add(1) == 1 {
			<-release
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "count", Args: `{"text":"a"}`}}}
		}
		return fakellm.Turn{Text: "Done once."}
	})
	in := Inbound{Channel: "web", ChatID: "u1", MessageID: "m-1", Text: "count a"}
	type handled struct {
		r   Reply
		err error
	}
	handle := func() <-chan handled {
		c := make(chan handled, 1)
		go func() {
			r, err := f.m.Handle(f.ctx, in)
			c <- handled{r, err}
		}()
		return c
	}
	first := handle()
	g.Eventually(func() int { return len(f.s.Requests()) }).Should(Equal(1))
	second := handle()
	close(release)
	h1, h2 := <-first, <-second
	g.Expect(h1.err).NotTo(HaveOccurred())
	g.Expect(h2.err).NotTo(HaveOccurred())
	r1, r2 := h1.r, h2.r
	g.Expect(r1.Text).To(Equal("Done once."))
	g.Expect(r2.Text).To(Equal("Done once."))
	g.Expect(r2.Duplicate).To(BeTrue())
	g.Expect(c.runs["a"].Load()).To(Equal(int32(1)))
	g.Expect(calls.Load()).To(Equal(int32(2)))
}

func TestAFailedTurnResumesOnRetryAndIsUnansweredOnceOvertaken(t *testing.T) {
	g := NewWithT(t)
	c := newCounterTool()
	f := newFixture(t, withCounter(c))
	f.s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "count", Args: `{"text":"a"}`}}},
		fakellm.Turn{Status: 400, ErrorBody: "bad request"},
	)
	in := Inbound{Channel: "web", ChatID: "u1", MessageID: "m-1", Text: "count a"}
	_, err := f.m.Handle(f.ctx, in)
	var se *llm.StatusError
	g.Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)

	// Retried with the same id: the turn goes on after a's stored result.
	f.s.Script(fakellm.Turn{Text: "Counted a."})
	r, err := f.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Text).To(Equal("Counted a."))
	g.Expect(c.runs["a"].Load()).To(Equal(int32(1)))

	// A turn that failed and was overtaken by a later message cannot go on.
	f.s.Script(fakellm.Turn{Status: 400, ErrorBody: "bad request"}, fakellm.Turn{Text: "Later."})
	failed := Inbound{Channel: "web", ChatID: "u1", MessageID: "m-2", Text: "fail"}
	_, err = f.m.Handle(f.ctx, failed)
	g.Expect(err).To(HaveOccurred())
	g.Expect(f.say(t, "u1", "later").Text).To(Equal("Later."))
	_, err = f.m.Handle(f.ctx, failed)
	g.Expect(errors.Is(err, ErrUnanswered)).To(BeTrue(), "%v", err)

	// Unfinished finds nothing left to resume.
	left, err := f.m.Unfinished(f.ctx, f.m.cfg.Clock.Now().Add(-resumeTestWindow))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty())
}

func TestUnfinishedListsTurnsCutShort(t *testing.T) {
	g := NewWithT(t)
	c := newCounterTool()
	f := newFixture(t, withCounter(c))
	f.s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "count", Args: `{"text":"block"}`}}})
	ctx, die := context.WithCancel(f.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := f.m.Handle(ctx, Inbound{Channel: "web", ChatID: "u9", MessageID: "m-9", Text: "block"})
		errc <- err
	}()
	<-c.blocked
	die()
	g.Expect(errors.Is(<-errc, ErrInterrupted)).To(BeTrue())
	f.s.Script(fakellm.Turn{Text: "Fine."})
	f.say(t, "u8", "a finished chat")

	left, err := f.m.Unfinished(f.ctx, f.m.cfg.Clock.Now().Add(-resumeTestWindow))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(Equal([]UnfinishedTurn{{Session: ID{"web", "u9", "default"}, MessageID: "m-9", Text: "block"}}))
}

const resumeTestWindow = time.Hour

func roles(msgs []store.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Role)
	}
	return out
}
