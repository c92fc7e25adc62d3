package protocol

import (
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
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
	g.Expect(err).To(MatchError(ContainSubstring("version 7 (this build reads up to 1)")))
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
