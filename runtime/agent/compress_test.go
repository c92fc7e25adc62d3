package agent

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
)

func user(s string) llm.Message      { return llm.Message{Role: llm.RoleUser, Content: s} }
func assistant(s string) llm.Message { return llm.Message{Role: llm.RoleAssistant, Content: s} }
func call(id, name string) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: "{}"}}}
}
func result(id, content string) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: id, Name: "t", Content: content}
}

// validChain checks what every provider requires: each tool call answered right
// after its assistant message, no orphan tool results.
func validChain(g Gomega, msgs []llm.Message) {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		g.Expect(m.Role == llm.RoleTool).To(BeFalse(), "orphan tool result at %d", i)
		for k, tc := range m.ToolCalls {
			g.Expect(i+1+k).To(BeNumerically("<", len(msgs)), "call %s unanswered", tc.ID)
			r := msgs[i+1+k]
			g.Expect(r.Role).To(Equal(llm.RoleTool))
			g.Expect(r.ToolCallID).To(Equal(tc.ID))
		}
		i += len(m.ToolCalls)
	}
}

func TestRepairToolChains(t *testing.T) {
	cases := []struct {
		name string
		in   []llm.Message
		want []string // role:id/content summary
	}{
		{"intact", []llm.Message{user("q"), call("a", "t"), result("a", "r"), assistant("done")},
			[]string{"user:q", "assistant:", "tool:a", "assistant:done"}},
		{"missing result (pod died mid-turn)", []llm.Message{user("q"), call("a", "t")},
			[]string{"user:q", "assistant:", "tool:a!"}},
		{"one of two results missing", []llm.Message{user("q"),
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "t"}, {ID: "b", Name: "t"}}}, result("b", "rb"), user("next")},
			[]string{"user:q", "assistant:", "tool:a!", "tool:b", "user:next"}},
		{"orphan result dropped", []llm.Message{user("q"), result("zz", "r"), assistant("x")},
			[]string{"user:q", "assistant:x"}},
		{"results out of order", []llm.Message{user("q"),
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "t"}, {ID: "b", Name: "t"}}}, result("b", "rb"), result("a", "ra")},
			[]string{"user:q", "assistant:", "tool:a", "tool:b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out := RepairToolChains(tc.in)
			var got []string
			for _, m := range out {
				s := string(m.Role) + ":"
				if m.Role == llm.RoleTool {
					s += m.ToolCallID
					if m.IsError {
						s += "!"
					}
				} else {
					s += m.Content
				}
				got = append(got, s)
			}
			g.Expect(got).To(Equal(tc.want))
			validChain(g, out)
		})
	}
}

func TestEstimateTokensCountsCJKPerCharacter(t *testing.T) {
	g := NewWithT(t)
	g.Expect(textTokens(strings.Repeat("abcd", 100))).To(Equal(100))
	g.Expect(textTokens(strings.Repeat("记忆", 50))).To(Equal(100))
}

func TestCompressBelowTriggerIsNoOp(t *testing.T) {
	g := NewWithT(t)
	c := &Compressor{Window: 100000}
	in := []llm.Message{user("hi"), assistant("hello")}
	out, st, err := c.Compress(context.Background(), "sys", in, nil, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(in))
	g.Expect(st.SummaryRounds + st.Dropped + st.TrimmedOutputs).To(BeZero())
}

func TestFastTrimMergesAndTrimsOldToolOutputs(t *testing.T) {
	g := NewWithT(t)
	big := strings.Repeat("x", 5000)
	in := []llm.Message{
		user("a"), user("b"), // merged
		call("c1", "t"), result("c1", big), // old: trimmed
		assistant("first"), assistant("second"), // merged
		user("now"), call("c2", "t"), result("c2", big), // current turn: kept
	}
	// Window small enough to trigger, large enough that trimming suffices.
	c := &Compressor{Window: 3000}
	out, st, err := c.Compress(context.Background(), "", in, nil, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Merged).To(Equal(2))
	g.Expect(st.TrimmedOutputs).To(Equal(1))
	g.Expect(out[0].Content).To(Equal("a\n\nb"))
	g.Expect(out[2].Content).To(HavePrefix(strings.Repeat("x", 1000) + "\n…[4000 characters of old tool output removed"))
	g.Expect(out[len(out)-1].Content).To(Equal(big), "the current turn's output stays whole")
	g.Expect(in[3].Content).To(Equal(big), "input not modified")
	g.Expect(st.After).To(BeNumerically("<", st.Before))
	validChain(g, out)
}

func TestHardTruncationKeepsUsersAndChains(t *testing.T) {
	g := NewWithT(t)
	var in []llm.Message
	for i := range 40 {
		id := string(rune('a'+i%26)) + strings.Repeat("z", i/26)
		in = append(in, user("question "+id), call(id, "t"), result(id, strings.Repeat("r", 1500)), assistant(strings.Repeat("answer ", 200)))
	}
	c := &Compressor{Window: 20000, Keep: 4}
	out, st, err := c.Compress(context.Background(), "", in, nil, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Dropped).To(BeNumerically(">", 0))
	g.Expect(st.After).To(BeNumerically("<=", 18000))
	users := 0
	for _, m := range out {
		if m.Role == llm.RoleUser {
			users++
		}
	}
	g.Expect(users).To(Equal(40), "user messages are always kept")
	g.Expect(out[0].Role).To(Equal(llm.RoleUser))
	g.Expect(out[len(out)-1]).To(Equal(in[len(in)-1]), "the latest messages stay")
	validChain(g, out)
}
