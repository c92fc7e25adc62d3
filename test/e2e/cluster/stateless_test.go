package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
)

// TestStatelessCompletionsInSessionPods drives the OpenAI endpoint's
// stateless mode in cluster mode with the official Go SDK: the turn runs in
// the agent's warm session pod on exactly the client's messages and
// settings, client tools make the round trip, streaming works, nothing is
// stored and the pod goes back to waiting warm; a client tool named like
// the agent's own is refused; a pod killed mid-request is a 503, and the
// SDK's own retry then gets the answer from another pod.
func TestStatelessCompletionsInSessionPods(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-stateless", "tenant-stateless-key"
	var slowOnce atomic.Bool
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case len(last.ToolResults) > 0:
			return fakellm.Turn{Text: "Weather: " + last.ToolResults[0].Content}
		case lastUser(r) == "weather?":
			return fakellm.Turn{Text: "Checking.", ToolCalls: []fakellm.Call{{ID: "call_w1", Name: "get_weather", Args: `{"city":"Paris"}`}}}
		case lastUser(r) == "slow" && slowOnce.CompareAndSwap(false, true):
			return fakellm.Turn{Text: "too late", Delay: time.Minute} // the pod dies before this answers
		}
		temp := "none"
		if r.Temperature != nil {
			temp = fmt.Sprint(*r.Temperature)
		}
		return fakellm.Turn{Text: fmt.Sprintf("%d messages, temperature %s, max_tokens %d", len(r.Messages), temp, r.MaxTokens)}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "10m", 1))
	agent := &picobotv1alpha1.Agent{}
	g.Eventually(func(g Gomega) {
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, agent)).To(Succeed())
		g.Expect(agent.Status.WarmPods).To(HaveValue(Equal(int32(1))))
		g.Expect(agent.Status.EffectiveTools).NotTo(BeEmpty())
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard only
	defer cancel()
	sdk := openai.NewClient(option.WithBaseURL(st.gatewayURL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	// History, system message and settings reach the model as sent.
	history := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Answer in French."),
		openai.UserMessage("old question"), openai.AssistantMessage("old answer"), openai.UserMessage("hello")}
	res, err := sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "helper", Messages: history,
		Temperature: openai.Float(0.25), MaxTokens: openai.Int(77)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Choices[0].Message.Content).To(Equal("4 messages, temperature 0.25, max_tokens 77"), "the system prompt and the three turns")
	reqs := st.llm.Requests()
	rec := reqs[len(reqs)-1]
	g.Expect(userTexts(rec)).To(Equal([]string{"old question", "hello"}))
	g.Expect(rec.System).To(And(HavePrefix("You are a test agent.\n\n"), ContainSubstring("\n\nAnswer in French.")),
		"the client's system message after the agent's prompt")
	g.Eventually(func() map[string]string {
		reg, _ := st.redis.HGetAll(ctx, wake.PodsKey(ns, "helper")).Result()
		return reg
	}, 10*time.Second, 50*time.Millisecond).Should(And(Not(BeEmpty()), HaveEach("warm")), "the pod went back to waiting warm")

	// A client tool ends the turn with its call; the follow-up with the
	// result gets the answer. Streamed, the same.
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather",
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
	params := openai.ChatCompletionNewParams{Model: "helper", Tools: []openai.ChatCompletionToolUnionParam{weather},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")}}
	res, err = sdk.Chat.Completions.New(ctx, params)
	g.Expect(err).NotTo(HaveOccurred())
	choice := res.Choices[0]
	g.Expect(choice.FinishReason).To(Equal("tool_calls"))
	g.Expect(choice.Message.ToolCalls).To(HaveLen(1))
	g.Expect(choice.Message.ToolCalls[0].Function.Arguments).To(Equal(`{"city":"Paris"}`))
	params.Messages = append(params.Messages, choice.Message.ToParam(), openai.ToolMessage("sunny, 21C", choice.Message.ToolCalls[0].ID))
	stream := sdk.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].Message.Content).To(Equal("Weather: sunny, 21C"))

	// Nothing stored: the tenant has no session.
	db, err := postgres.Open(ctx, strings.TrimPrefix(st.conn[0], "PICOBOT_POSTGRES_URL="))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = db.Close() }()
	sessions, err := db.ListSessions(store.WithTenant(ctx, ns), store.SessionFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sessions).To(BeEmpty())

	// A client tool named like one of the agent's is refused by name.
	own := agent.Status.EffectiveTools[0]
	clash := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: own})
	_, err = sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "helper", Tools: []openai.ChatCompletionToolUnionParam{clash},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var apiErr *openai.Error
	g.Expect(errors.As(err, &apiErr)).To(BeTrue(), "%v", err)
	g.Expect(apiErr.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(apiErr.Param).To(Equal("tools"))
	g.Expect(apiErr.Message).To(ContainSubstring(own))

	// The pod running a request dies: 503, nothing stored.
	before := len(st.llm.Requests())
	slow := openai.ChatCompletionNewParams{Model: "helper", Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("s"), openai.UserMessage("slow")}}
	done := make(chan error, 1)
	go func() { _, err := sdk.Chat.Completions.New(ctx, slow); done <- err }()
	g.Eventually(func() int { return len(st.llm.Requests()) }, 60*time.Second, 50*time.Millisecond).Should(BeNumerically(">", before))
	victim := st.statelessPod(t, ns, "helper")
	g.Expect(victim).NotTo(BeEmpty())
	for _, p := range st.pods(t, ns, "helper") {
		if p.Name == victim {
			g.Expect(st.runner.Kill(p.UID)).To(BeTrue())
		}
	}
	err = <-done
	g.Expect(errors.As(err, &apiErr)).To(BeTrue(), "%v", err)
	g.Expect(apiErr.StatusCode).To(Equal(http.StatusServiceUnavailable), "%v", err)
	g.Expect(apiErr.Message).To(ContainSubstring("send it again"))

	// The SDK's default retries ride it out: another pod answers.
	retrying := openai.NewClient(option.WithBaseURL(st.gatewayURL+"/v1/"), option.WithAPIKey(key))
	res, err = retrying.Chat.Completions.New(ctx, slow)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Choices[0].Message.Content).To(Equal("2 messages, temperature none, max_tokens 0"))
}

// statelessPod is the pod the agent's registry shows running a stateless
// request, "" when none.
func (s *stack) statelessPod(tb testing.TB, ns, agentName string) string {
	tb.Helper()
	reg, err := s.redis.HGetAll(context.Background(), wake.PodsKey(ns, agentName)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for pod, state := range reg {
		if strings.HasPrefix(state, "busy stateless ") {
			return pod
		}
	}
	return ""
}
