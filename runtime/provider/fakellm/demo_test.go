package fakellm

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestDemoPicksTheAgentsTools(t *testing.T) {
	all := []string{"calculator", "web_fetch", "file_write", "bash", "memory_store"}
	user := func(text string) []Message { return []Message{{Role: "user", Content: text}} }
	for _, tc := range []struct {
		text, tool, args string
	}{
		{"what is 6*7?", "calculator", `{"expression":"6*7","function":"evaluate"}`},
		{"fetch https://example.com, and summarise it", "web_fetch", `{"url":"https://example.com"}`},
		{"please write a file", "file_write", ""},
		{"run ls -la", "bash", `{"command":"ls -la"}`},
		{"Remember that my favourite colour is green", "memory_store", `{"content":"my favourite colour is green","key":"my_favourite_colour_is"}`},
	} {
		g := NewWithT(t)
		turn := Demo(Recorded{Tools: all, Messages: user(tc.text)})
		g.Expect(turn.ToolCalls).To(HaveLen(1), tc.text)
		g.Expect(turn.ToolCalls[0].Name).To(Equal(tc.tool), tc.text)
		if tc.args != "" {
			g.Expect(turn.ToolCalls[0].Args).To(MatchJSON(tc.args), tc.text)
		}
		// Without the tool, no call: the help, naming only what the agent has.
		turn = Demo(Recorded{Tools: []string{"calculator"}, Messages: user(tc.text)})
		if tc.tool != "calculator" {
			g.Expect(turn.ToolCalls).To(BeEmpty(), tc.text)
			g.Expect(turn.Text).To(ContainSubstring("`what is 6*7?`"))
			g.Expect(turn.Text).NotTo(ContainSubstring("fetch"))
		}
	}

	g := NewWithT(t)
	report := Demo(Recorded{Tools: all, Messages: []Message{
		{Role: "user", Content: "what is 6*7?"},
		{Role: "assistant", ToolCalls: []Call{{ID: "call_1", Name: "calculator"}}},
		{Role: "tool", ToolResults: []ToolResult{{CallID: "call_1", Content: "42"}}},
	}})
	g.Expect(report.ToolCalls).To(BeEmpty())
	g.Expect(report.Text).To(HavePrefix("The **calculator** tool returned:\n\n```\n42\n```"))
}
