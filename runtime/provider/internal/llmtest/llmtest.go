// Package llmtest builds realistic llm.Requests for provider tests and
// benchmarks, so both wire packages are measured on the same conversation.
package llmtest

import (
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
)

// Conversation returns a request of n messages cycling through a user
// question, an assistant turn with text and two tool calls, their two tool
// results (one an error) and an assistant answer, with sizes typical of an
// agent session (tool results of ~1.5 KB), plus tools tool definitions.
func Conversation(n, tools int) llm.Request {
	req := llm.Request{
		System:   "You are PicoBot, a helpful assistant running inside a Kubernetes cluster. " + strings.Repeat("Follow the operator's policies. ", 40),
		Messages: make([]llm.Message, 0, n),
		Tools:    make([]llm.ToolDef, tools),
	}
	for i := 0; len(req.Messages) < n; i++ {
		turn := []llm.Message{
			{Role: llm.RoleUser, Content: fmt.Sprintf("Question %d: ", i) + strings.Repeat("please look at the deployment logs and tell me what failed. ", 5)},
			{Role: llm.RoleAssistant, Content: "Let me check the pods and their logs.", ToolCalls: []llm.ToolCall{
				{ID: fmt.Sprintf("call_%d_a", i), Name: "kubectl_get", Arguments: `{"resource":"pods","namespace":"default","selector":"app=web","output":"wide"}`},
				{ID: fmt.Sprintf("call_%d_b", i), Name: "read_logs", Arguments: `{"pod":"web-5d9c7b6f4-x2x9k","container":"app","tail":200}`},
			}},
			{Role: llm.RoleTool, ToolCallID: fmt.Sprintf("call_%d_a", i), Name: "kubectl_get", Content: strings.Repeat("web-5d9c7b6f4-x2x9k   1/1   Running   3   2d   10.0.0.12   node-1\n", 24)},
			{Role: llm.RoleTool, ToolCallID: fmt.Sprintf("call_%d_b", i), Name: "read_logs", IsError: true, Content: "error: container \"app\" in pod is waiting to start: " + strings.Repeat("CrashLoopBackOff ", 60)},
			{Role: llm.RoleAssistant, Content: strings.Repeat("The web pod is crash-looping because its config map is missing a key. ", 6)},
		}
		for _, m := range turn {
			if len(req.Messages) < n {
				req.Messages = append(req.Messages, m)
			}
		}
	}
	for i := range req.Tools {
		req.Tools[i] = llm.ToolDef{
			Name:        fmt.Sprintf("tool_%02d", i),
			Description: "Runs an operation against the cluster or the workspace and returns its output as text. " + strings.Repeat("Use it when needed. ", 5),
			Parameters: []byte(`{"type":"object","properties":{` +
				`"resource":{"type":"string","description":"Kind of object, e.g. pods or deployments"},` +
				`"namespace":{"type":"string","description":"Namespace; the agent's own when empty"},` +
				`"selector":{"type":"string","description":"Label selector"},` +
				`"limit":{"type":"integer","minimum":1,"maximum":500},` +
				`"output":{"type":"string","enum":["name","wide","yaml","json"]}},` +
				`"required":["resource"],"additionalProperties":false}`),
		}
	}
	return req
}
