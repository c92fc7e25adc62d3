package agent

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// Client tools are offered beside the agent's; the agent's calls run, and
// the first step that calls a client tool ends the turn with only the
// client's calls (the agent's calls of that step are not run). The
// client's settings reach every model call, on both protocols.
func TestClientToolsEndTheTurn(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			s := fakellm.New()
			defer s.Close()
			s.Script(
				fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"a"}`}}},
				fakellm.Turn{Text: "Asking.", ToolCalls: []fakellm.Call{
					{ID: "c_echo", Name: "echo", Args: `{"text":"b"}`},
					{ID: "c_client", Name: "lookup", Args: `{"q":"x"}`}}},
			)
			reg, err := tool.NewRegistry(echoTool())
			g.Expect(err).NotTo(HaveOccurred())
			temp := 0.5
			loop := &Loop{Provider: newProvider(t, s, proto), Tools: reg, MaxTokens: 1000}
			rec := &recorder{}
			out, err := loop.Run(context.Background(), Input{
				History:     []llm.Message{{Role: llm.RoleUser, Content: "go"}},
				Sink:        rec.sink,
				Settings:    &llm.Settings{MaxTokens: 50, Temperature: &temp},
				ClientTools: []llm.ToolDef{{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)}},
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.StopReason).To(Equal(StopClientTools))
			g.Expect(out.Final).To(Equal("Asking."))
			g.Expect(out.ClientCalls).To(Equal([]llm.ToolCall{{ID: "c_client", Name: "lookup", Arguments: `{"q":"x"}`}}))
			last := out.New[len(out.New)-1]
			g.Expect(last.Role).To(Equal(llm.RoleAssistant))
			g.Expect(last.ToolCalls).To(Equal(out.ClientCalls), "the agent's call of that step is left out")
			g.Expect(out.New).To(HaveLen(3), "the first step's call and result, then the client's call")
			g.Expect(rec.kinds()).To(Equal([]turn.EventKind{turn.EventUsage, turn.EventToolCall, turn.EventToolResult, turn.EventUsage}),
				"no event for calls that were not run")
			reqs := s.Requests()
			g.Expect(reqs).To(HaveLen(2))
			for _, r := range reqs {
				g.Expect(r.Tools).To(Equal([]string{"echo", "lookup"}))
				g.Expect(r.MaxTokens).To(Equal(50))
				g.Expect(r.Temperature).To(HaveValue(Equal(0.5)))
			}
		})
	}
}
