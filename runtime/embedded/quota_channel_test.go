package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const budgetChannelYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: ops
spec:
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  channels:
  - {type: webhook, name: alerts, chatID: ops-room, secretRef: {name: alerts}}
---
apiVersion: v1
kind: Secret
metadata:
  name: alerts
stringData:
  signingSecret: s3cret
  url: %[2]s
---
apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata:
  name: default
spec:
  budget: {dayTokens: 100}
`

// TestBudgetExhaustedToldToAChatOnce: a chat platform's chat (a webhook
// channel, its platform a test receiver) whose tenant's budget is spent is
// told so once, not on each of its refused messages; the model is not
// asked for them; another chat is told too, once.
func TestBudgetExhaustedToldToAChatOnce(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.Respond(func(fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "done", Usage: &fakellm.Usage{InputTokens: 90, OutputTokens: 10}}
	})
	recv := &hookReceiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, budgetChannelYAML, s.URL(), hook.URL), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())

	log := slog.New(slog.DiscardHandler)
	var rt *Runtime
	mgr := channel.NewManager(channel.Options{Log: log, OnInbound: func(ctx context.Context, agent string, in channel.Inbound) error {
		return rt.Inbound(ctx, agent, in)
	}})
	state, err := OpenState(context.Background(), StateDir(dir, ""))
	g.Expect(err).NotTo(HaveOccurred())
	disp, err := outbound.New(outbound.Config{Store: state.Store, Channels: mgr, Web: outbound.StoredOnly{}, Log: log})
	g.Expect(err).NotTo(HaveOccurred())
	rt, err = Open(context.Background(), Options{Dir: dir, Env: func(string) string { return "" }, Log: log, State: state})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rt.ServeChannels(ctx, mgr, disp)

	// answerChannel is what Inbound runs in the background: called here
	// in turn, each message is answered (or not) before the next.
	say := func(chat, id string) {
		rt.answerChannel(ctx, disp, "ops", channel.Inbound{Channel: "alerts", Type: "webhook", ChatID: chat, MessageID: id, Text: "status?"})
	}
	say("ops-room", "1") // 100 tokens: the day's budget
	for i := range 4 {
		say("ops-room", fmt.Sprint(2+i))
	}
	say("dev-room", "1")
	say("dev-room", "2")

	var texts []string
	for _, b := range recv.got() {
		raw, _ := json.Marshal(b)
		texts = append(texts, string(raw))
	}
	g.Expect(texts).To(HaveLen(3), "%v", texts)
	g.Expect(texts[0]).To(ContainSubstring("done"))
	for _, text := range texts[1:] {
		g.Expect(text).To(ContainSubstring("model budget exhausted: today's model budget of 100 tokens is spent (100 used)"))
	}
	g.Expect(strings.Contains(texts[1], "ops-room")).To(BeTrue(), texts[1])
	g.Expect(strings.Contains(texts[2], "dev-room")).To(BeTrue(), texts[2])
	g.Expect(s.Requests()).To(HaveLen(1), "the refused messages never reached the model")
}
