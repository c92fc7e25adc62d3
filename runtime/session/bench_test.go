package session

import (
	"fmt"
	"testing"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// BenchmarkToolTurn is one turn with a tool call through the manager on
// SQLite: two model calls, one tool, the turn's four messages stored (with
// step persistence, the tool-calling message and the result as they come,
// the answer at the end). Chats rotate so that histories stay short.
func BenchmarkToolTurn(b *testing.B) {
	f := newFixture(b)
	f.s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if last := r.Messages[len(r.Messages)-1]; len(last.ToolResults) == 0 {
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "echo", Args: `{"text":"hi"}`}}}
		}
		return fakellm.Turn{Text: "done"}
	})
	i := 0
	for b.Loop() {
		in := Inbound{Channel: "web", ChatID: fmt.Sprintf("c%d", i%50), MessageID: fmt.Sprintf("m%d", i), Text: "go"}
		if _, err := f.m.Handle(f.ctx, in); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
