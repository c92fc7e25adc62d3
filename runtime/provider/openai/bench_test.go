package openai_test

import (
	"context"
	"testing"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/provider/internal/llmtest"
	"github.com/picobot/picobot/runtime/provider/openai"
)

// BenchmarkBuildRequest measures encoding a 100-message, 40-tool agent
// request to the wire JSON (the tools' encoding cached, as from the second
// call of an agent on).
func BenchmarkBuildRequest(b *testing.B) {
	p, err := openai.New(openai.Options{Model: "gpt-bench", MaxTokens: 4096})
	if err != nil {
		b.Fatal(err)
	}
	req := llmtest.Conversation(100, 40)
	b.ReportAllocs()
	for b.Loop() {
		data, err := p.BuildBody(req, true)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
	}
}

// BenchmarkRoundTrip is a reference for the fixed cost of one non-streaming
// call through the SDK against an instant local server.
func BenchmarkRoundTrip(b *testing.B) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "ok", Usage: &fakellm.Usage{InputTokens: 10, OutputTokens: 1}}
	})
	p := newProvider(b, s, 0)
	req := llm.Request{System: "be brief", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Complete(ctx, req, nil); err != nil {
			b.Fatal(err)
		}
	}
}
