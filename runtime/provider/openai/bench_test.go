package openai_test

import (
	"context"
	"testing"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/provider/internal/llmtest"
	"github.com/picobot/picobot/runtime/provider/openai"
)

// BenchmarkBuildRequest measures translating a 100-message, 40-tool agent
// request into SDK parameters and encoding it to the wire JSON the way the SDK does.
func BenchmarkBuildRequest(b *testing.B) {
	p, err := openai.New(openai.Options{Model: "gpt-bench", MaxTokens: 4096})
	if err != nil {
		b.Fatal(err)
	}
	req := llmtest.Conversation(100, 40)
	b.ReportAllocs()
	for b.Loop() {
		params, err := p.BuildParams(req, true)
		if err != nil {
			b.Fatal(err)
		}
		data, err := params.MarshalJSON() // as the SDK encodes the body
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
