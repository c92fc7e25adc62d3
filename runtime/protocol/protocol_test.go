package protocol

import (
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

func TestOutcomeReadsTheFormatBeforeVersioning(t *testing.T) {
	g := NewWithT(t)
	var got Outcome
	g.Expect(json.Unmarshal([]byte(`{"SessionID":"web:a/u:default","Command":"","Text":"hi","Duplicate":true}`), &got)).To(Succeed())
	g.Expect(got).To(Equal(Outcome{SessionID: "web:a/u:default", Text: "hi", Duplicate: true}))
	b, err := json.Marshal(got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal(`{"session_id":"web:a/u:default","text":"hi","duplicate":true}`))
	var back Outcome
	g.Expect(json.Unmarshal(b, &back)).To(Succeed())
	g.Expect(back).To(Equal(got))
}

func TestInboundVersions(t *testing.T) {
	g := NewWithT(t)
	b, err := EncodeInbound(Inbound{ID: "a/u/1", Channel: ChannelWeb, ChatKey: "a/u", Text: "hi"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring(`"v":1`))
	in, err := DecodeInbound(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Text).To(Equal("hi"))
	_, err = DecodeInbound([]byte(`{"v":7,"id":"x","channel":"web","chat_key":"a/u"}`))
	g.Expect(errors.Is(err, ErrUnknownVersion)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("version 7 (this build reads up to 3)")))
	// A delegated task is version 2, which a version-1 runtime refuses
	// rather than run it without its narrowed tools and depth.
	b, err = EncodeInbound(Inbound{ID: "r1", Channel: ChannelDelegate, ChatKey: "r1", Text: "task",
		Delegation: &Delegation{RunID: "r1", ParentAgent: "lead", Depth: 2, Tools: []string{}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring(`"v":2`))
	in, err = DecodeInbound(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Delegation).To(Equal(&Delegation{RunID: "r1", ParentAgent: "lead", Depth: 2, Tools: []string{}}), "an empty tools list stays a narrowing to none")
	// A message with files is version 3: a runtime from before files
	// (reading up to 2) refuses it instead of answering the text alone.
	files := []File{{ID: "art_1", Name: "notes.md", MediaType: "text/markdown", Size: 9}}
	b, err = EncodeInbound(Inbound{ID: "a/u/2", Channel: ChannelWeb, ChatKey: "a/u", Text: "read this", Files: files})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring(`"v":3`))
	in, err = DecodeInbound(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Files).To(Equal(files))
	var stamped struct{ V int }
	g.Expect(json.Unmarshal(b, &stamped)).To(Succeed())
	err = checkVersion(stamped.V, 2)
	g.Expect(errors.Is(err, ErrUnknownVersion)).To(BeTrue(), "a version-2 reader refuses it")
	g.Expect(err).To(MatchError(ContainSubstring("version 3 (this build reads up to 2)")))
	_, err = DecodeInbound([]byte(`{"id":"x","text":"hi"}`))
	g.Expect(err).To(MatchError(ContainSubstring("no channel or chat_key")))
}

func TestChannels(t *testing.T) {
	g := NewWithT(t)
	for _, c := range []string{ChannelWeb, ChannelOpenAI, ChannelTerminal, ChannelCron} {
		g.Expect(GatewayClient(c)).To(BeTrue(), c)
	}
	g.Expect(GatewayClient("telegram")).To(BeFalse())
	g.Expect(Chat{Agent: "a", ChatID: "u"}.Key()).To(Equal("a/u"))
	g.Expect(Chat{Channel: "telegram", Agent: "a", ChatID: "-100"}.Key()).To(Equal("-100"))
	g.Expect(Chat{Agent: "a", ChatID: "u"}.SessionID("d")).To(Equal("web:a/u:d"))
}

func TestFrameVersions(t *testing.T) {
	g := NewWithT(t)
	call := &llm.ToolCall{ID: "c1", Name: "bash", Arguments: `{"command":"ls"}`}
	sent := Frame{MessageID: "a/u/1", Kind: string(turn.EventToolResult), Event: &turn.Event{
		Kind: turn.EventToolResult, Step: 2, ToolCall: call,
		ToolResult:  &turn.ToolResult{CallID: "c1", Name: "bash", Content: "boom", IsError: true, Artifacts: []tool.Artifact{{Name: "big.png", Data: []byte("secret bytes")}}},
		Attachments: []turn.Attachment{{ID: "art1", Name: "big.png", MediaType: "image/png"}},
	}}
	b, err := EncodeFrame(sent)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(HavePrefix(`{"v":2,"message_id":"a/u/1","kind":"tool_result","event":{"kind":"tool_result","step":2,"tool_call":{"id":"c1"`))
	g.Expect(string(b)).To(ContainSubstring(`"tool_result":{"call_id":"c1","name":"bash","content":"boom","is_error":true}`))
	g.Expect(string(b)).NotTo(ContainSubstring("secret bytes"), "artifact bytes stay in the artifact store")
	got, err := DecodeFrame(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.V).To(Equal(FrameVersion))
	g.Expect(got.Event.ToolCall).To(Equal(call))
	g.Expect(*got.Event.ToolResult).To(Equal(turn.ToolResult{CallID: "c1", Name: "bash", Content: "boom", IsError: true}))
	g.Expect(got.Event.Attachments).To(Equal(sent.Event.Attachments))

	// Version 1, as a session pod before the event was tagged wrote it.
	v1 := `{"v":1,"message_id":"a/u/1","kind":"tool_result","event":{"Kind":"tool_result","Step":2,` +
		`"Text":"","ToolCall":{"id":"c1","name":"bash","arguments":"{\"command\":\"ls\"}"},` +
		`"ToolResult":{"CallID":"c1","Name":"bash","Content":"boom","IsError":true,"Artifacts":null},"Usage":null,` +
		`"Attachments":[{"id":"art1","name":"big.png","media_type":"image/png"}]}}`
	old, err := DecodeFrame([]byte(v1))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(old.Event).To(Equal(got.Event), "a version 1 frame reads as the same event")

	v3 := []byte(`{"v":3,"message_id":"a/u/9","kind":"thinking","event":{"kind":"thinking"}}`)
	refused, err := DecodeFrame(v3)
	g.Expect(errors.Is(err, ErrUnknownVersion)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("version 3 (this build reads up to 2)")))
	g.Expect(refused.MessageID).To(Equal("a/u/9"), "a refused frame still says whose it was")
	g.Expect(refused.Event).To(BeNil())

	for payload, want := range map[string]string{
		`{"v":2,"message_id":"a/u/1"}`:               "no kind",
		`{"v":2,"message_id":"a/u/1","kind":"done"}`: "done without an outcome",
		`{"v":2,"kind":`:                             "malformed event frame",
	} {
		_, err := DecodeFrame([]byte(payload))
		g.Expect(err).To(MatchError(ContainSubstring(want)), payload)
	}
}
