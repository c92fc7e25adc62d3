package agenthost_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// recorder is a feature's tool: it records its calls.
type recorder struct {
	name string
	mu   sync.Mutex
	args []string
}

func (r *recorder) Name() string            { return r.name }
func (r *recorder) Description() string     { return "test tool " + r.name }
func (r *recorder) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (r *recorder) Traits() tool.Traits     { return tool.Traits{} }
func (r *recorder) Run(_ context.Context, _ tool.Env, args json.RawMessage) (tool.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.args = append(r.args, string(args))
	return tool.Text(r.name + " done"), nil
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.args...)
}

// events is the order in which features were built and closed.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) { e.mu.Lock(); defer e.mu.Unlock(); e.log = append(e.log, s) }
func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// fake is a feature whose parts are given; it records the agent it saw.
type fake struct {
	name   string
	events *events
	tools  []tool.Tool
	prompt string // "" for none; "-" for a section that is empty
	checks []health.Check
	err    error
	saw    *feature.Agent
}

func (f *fake) Name() string { return f.name }

func (f *fake) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	f.events.add("build " + f.name)
	f.saw = a
	if f.err != nil {
		return feature.Parts{}, f.err
	}
	parts := feature.Parts{Tools: f.tools, Close: func() { f.events.add("close " + f.name) }}
	switch f.prompt {
	case "":
	case "-":
		parts.Prompt = func(context.Context, session.PromptInput) string { return "" }
	default:
		parts.Prompt = func(_ context.Context, in session.PromptInput) string {
			return f.prompt + " for " + in.SessionID.ChatID + ": " + in.Text
		}
	}
	if f.checks != nil {
		parts.Health = func(context.Context) []health.Check { return f.checks }
	}
	return parts, nil
}

func TestFeatures(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	ev := &events{}
	send, remember, cron := &recorder{name: "send_message"}, &recorder{name: "bot_remember"}, &recorder{name: "cron_add"}
	alpha := &fake{name: "alpha", events: ev, tools: []tool.Tool{send, remember}, prompt: "Alpha section",
		checks: []health.Check{{Name: "alpha", OK: true, Message: "ready"}}}
	beta := &fake{name: "beta", events: ev, tools: []tool.Tool{cron}, prompt: "-",
		checks: []health.Check{{Name: "beta-store", OK: false, Message: "no store", Fix: "configure one"}, {Name: "beta-clock", OK: true}}}
	gamma := &fake{name: "gamma", events: ev, prompt: "Gamma section"}
	h := f.host()
	h.Features = []agenthost.Feature{alpha, beta, gamma}
	b := build(t, h, agentWith("helper", picobotv1alpha1.AgentSpec{Instructions: "You help.",
		Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", BaseURL: f.llm.URL()}},
		Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Allow: []string{"calculator", "send_message", "cron_add"}}}}))

	g.Expect(ev.get()).To(Equal([]string{"build alpha", "build beta", "build gamma"}), "in the host's order")
	// Every feature sees the agent as assembled so far.
	for _, fk := range []*fake{alpha, beta, gamma} {
		a := fk.saw
		g.Expect(a.Spec.Name).To(Equal("helper"))
		g.Expect(a.ProviderName).To(Equal("openai"))
		g.Expect(a.ModelName).To(Equal("m"))
		g.Expect(a.Provider).NotTo(BeNil())
		g.Expect(a.Host.Mode).To(Equal(feature.ModeEmbedded))
		g.Expect(a.Host.Tenant).To(Equal(tenant))
		g.Expect(a.Host.Store).To(BeIdenticalTo(f.store))
		g.Expect(a.Host.StateDir).To(Equal(f.dir))
		g.Expect(policy.Allowed(a.Policy, "send_message")).To(BeTrue())
		g.Expect(policy.Allowed(a.Policy, "bot_remember")).To(BeFalse())
	}
	// A feature's tools are offered when the policy allows them.
	g.Expect(b.Info.Tools).To(Equal([]string{"calculator", "cron_add", "send_message"}))
	g.Expect(b.Health(context.Background())).To(Equal([]health.Check{{Name: "alpha", OK: true, Message: "ready"},
		{Name: "beta-store", OK: false, Message: "no store", Fix: "configure one"}, {Name: "beta-clock", OK: true}}))

	// A turn: the prompt sections join the system prompt (the empty one
	// leaves no gap), and the model can call a feature's tool.
	f.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "send_message", Args: `{"text":"hi"}`}}}, fakellm.Turn{Text: "Sent."})
	reply, err := say(b, "alice", "Tell the team.")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Text).To(Equal("Sent."))
	g.Expect(send.calls()).To(Equal([]string{`{"text":"hi"}`}))
	g.Expect(remember.calls()).To(BeEmpty())
	sys := f.llm.Requests()[0].System
	g.Expect(sys).To(ContainSubstring("You help."))
	g.Expect(sys).To(ContainSubstring("Alpha section for alice: Tell the team.\n\nGamma section for alice: Tell the team."))

	// Closing ends the features in reverse order, once.
	b.Close()
	g.Expect(ev.get()[3:]).To(Equal([]string{"close gamma", "close beta", "close alpha"}))
	b.Close()
	g.Expect(ev.get()).To(HaveLen(6))
}

func TestFeaturesSeeAnAgentWithoutAModel(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	fk := &fake{name: "alpha", events: &events{}}
	h := f.host()
	h.Features = []agenthost.Feature{fk}
	build(t, h, agentWith("keyless", picobotv1alpha1.AgentSpec{}))
	g.Expect(fk.saw.ProviderName).To(BeEmpty())
	g.Expect(fk.saw.ModelName).To(BeEmpty())
	// Its provider is the agent's, which explains the missing model.
	_, err := fk.saw.Provider.Complete(context.Background(), llmRequest(), nil)
	g.Expect(err).To(MatchError(HavePrefix("agent keyless has no usable model: spec.model is not set")))
}

func llmRequest() llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
}

// A feature that fails stops the agent from loading, and what was built
// before it is closed.
func TestAFailingFeatureUndoesTheBuild(t *testing.T) {
	cases := []struct {
		name string
		bad  func(ev *events) *fake
		err  string
	}{
		{name: "its Build fails", bad: func(ev *events) *fake {
			return &fake{name: "broken", events: ev, err: errors.New("no bucket configured")}
		}, err: "agent helper: broken: no bucket configured"},
		{name: "its tool takes a built-in's name", bad: func(ev *events) *fake {
			return &fake{name: "clash", events: ev, tools: []tool.Tool{&recorder{name: "calculator"}}}
		}, err: `agent helper: clash: failed to register tool "calculator": name already registered`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			ev := &events{}
			h := f.host()
			h.Features = []agenthost.Feature{&fake{name: "alpha", events: ev}, tc.bad(ev), &fake{name: "never", events: ev}}
			b, err := h.Build(context.Background(), agentWith("helper", picobotv1alpha1.AgentSpec{}))
			g.Expect(err).To(MatchError(tc.err))
			g.Expect(b).To(BeNil())
			log := ev.get()
			g.Expect(log).NotTo(ContainElement("build never"))
			g.Expect(log).To(ContainElement("close alpha"))
		})
	}
}
