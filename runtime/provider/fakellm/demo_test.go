package fakellm

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestDemoPicksTheAgentsTools(t *testing.T) {
	all := []string{"calculator", "web_fetch", "file_write", "bash", "memory_store", "memory_recall", "browser", "cron_add"}
	user := func(text string) []Message { return []Message{{Role: "user", Content: text}} }
	for _, tc := range []struct {
		text, tool, args string
	}{
		{"what is 6*7?", "calculator", `{"expression":"6*7","function":"evaluate"}`},
		{"fetch https://example.com, and summarise it", "web_fetch", `{"url":"https://example.com"}`},
		{"please write a file", "file_write", ""},
		{"run ls -la", "bash", `{"command":"ls -la"}`},
		{"Remember that my favourite colour is green", "memory_store", `{"content":"my favourite colour is green","key":"my_favourite_colour_is"}`},
		{"what do you remember about my favourite colour?", "memory_recall", `{"query":"my favourite colour"}`},
		{"take a screenshot of https://example.com", "browser", `{"action":"open","url":"https://example.com"}`},
		{"every 5 minutes check the weather", "cron_add", `{"name":"check_the_weather","prompt":"check the weather","schedule":{"type":"every","every_ms":300000}}`},
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

	// The screenshot showcase takes two calls: open, then screenshot.
	shot := Demo(Recorded{Tools: all, Messages: []Message{
		{Role: "user", Content: "take a screenshot of https://example.com"},
		{Role: "assistant", ToolCalls: []Call{{ID: "call_1", Name: "browser", Args: `{"action":"open","url":"https://example.com"}`}}},
		{Role: "tool", ToolResults: []ToolResult{{CallID: "call_1", Content: "Opened Example Domain"}}},
	}})
	g.Expect(shot.ToolCalls).To(HaveLen(1))
	g.Expect(shot.ToolCalls[0].Args).To(MatchJSON(`{"action":"screenshot"}`))
	done := Demo(Recorded{Tools: all, Messages: []Message{
		{Role: "user", Content: "take a screenshot of https://example.com"},
		{Role: "assistant", ToolCalls: []Call{{ID: "call_1", Name: "browser", Args: `{"action":"open","url":"https://example.com"}`}}},
		{Role: "tool", ToolResults: []ToolResult{{CallID: "call_1", Content: "Opened"}}},
		{Role: "assistant", ToolCalls: []Call{{ID: "call_2", Name: "browser", Args: `{"action":"screenshot"}`}}},
		{Role: "tool", ToolResults: []ToolResult{{CallID: "call_2", Content: "Took a screenshot"}}},
	}})
	g.Expect(done.ToolCalls).To(BeEmpty())
	g.Expect(done.Text).To(HavePrefix("The **browser** tool returned"))
}
