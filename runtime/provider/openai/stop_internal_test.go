package openai

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
)

func TestStopReason(t *testing.T) {
	tests := []struct {
		finish   string
		hasCalls bool
		want     llm.StopReason
	}{
		{finish: "stop", want: llm.StopEnd},
		{finish: "content_filter", want: llm.StopEnd},
		{finish: "length", want: llm.StopLength},
		{finish: "length", hasCalls: true, want: llm.StopLength},
		{finish: "tool_calls", hasCalls: true, want: llm.StopToolCalls},
		{finish: "function_call", hasCalls: true, want: llm.StopToolCalls},
		// Ollama and older vLLM report "stop" alongside tool calls.
		{finish: "stop", hasCalls: true, want: llm.StopToolCalls},
	}
	for _, tt := range tests {
		t.Run(tt.finish, func(t *testing.T) {
			NewWithT(t).Expect(stopReason(tt.finish, tt.hasCalls)).To(Equal(tt.want))
		})
	}
}

func TestIsOverflow(t *testing.T) {
	tests := []struct {
		code, msg string
		want      bool
	}{
		{code: "context_length_exceeded", msg: "anything", want: true},
		{msg: "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens", want: true},
		{msg: "Invalid 'messages[2].content': string too long", want: false},
		{code: "rate_limit_exceeded", msg: "Rate limit reached", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.code+tt.msg, func(t *testing.T) {
			NewWithT(t).Expect(isOverflow(tt.code, tt.msg)).To(Equal(tt.want))
		})
	}
}
