package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool/bot"
)

const botAgentsYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: gpt-ops
spec:
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["bot_status", "bot_connector"]
  channels:
  - {type: webhook, name: alerts, chatID: ops-room, secretRef: {name: alerts}}
  - {type: web}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: claude-ops
spec:
  model: {provider: anthropic, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["bot_status", "bot_connector"]
  channels:
  - {type: webhook, name: pager, chatID: ops-room, secretRef: {name: alerts}}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: quiet
spec:
  model: {provider: openai, model: fake, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["bot_status", "bot_connector"]
---
apiVersion: v1
kind: Secret
metadata:
  name: alerts
stringData:
  signingSecret: s3cret
  url: %[2]s
`

// hookReceiver records what a webhook channel POSTs.
type hookReceiver struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	h.mu.Lock()
	h.bodies = append(h.bodies, m)
	h.mu.Unlock()
	_, _ = io.WriteString(w, `{"message_id":"m1"}`)
}

func (h *hookReceiver) got() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]any(nil), h.bodies...)
}

// bot_status and bot_connector in embedded mode on both protocols:
// bot_status reports this process serving the chat, the turn in progress
// and the model from spec; bot_connector lists the agent's connectors with
// their chat and allowed instance, and send reaches the webhook receiver
// through the real channel manager and outbound dispatcher. An agent
// without channels is not offered bot_connector.
func TestBotStatusAndConnector(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	recv := &hookReceiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, botAgentsYAML, s.URL(), hook.URL), 0o600)).To(Succeed())
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
	feat := bot.NewFeature(bot.Config{Sender: disp, Channels: mgr,
		Instances: func(ctx context.Context, tenant, agent string) ([]bot.Instance, error) {
			return rt.Instances(ctx, tenant, agent)
		},
		Queue: func(ctx context.Context, tenant, agent string) (bot.Queue, error) {
			return rt.Queue(ctx, tenant, agent)
		}})
	rt, err = Open(context.Background(), Options{Dir: dir, Env: func(string) string { return "" }, Log: log, State: state,
		Features: []agenthost.Feature{feat}})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rt.ServeChannels(ctx, mgr, disp)
	e := &env{s: s, dir: dir, rt: rt, http: httptest.NewServer(gateway.New(rt, "", nil, nil))}
	t.Cleanup(e.stop)
	c := dial(t, e)

	for agent, conn := range map[string]string{"gpt-ops": "alerts", "claude-ops": "pager"} {
		before := len(s.Requests())
		s.Script(
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_status", Args: `{}`}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_connector", Args: `{"action":"list"}`}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_connector", Args: fmt.Sprintf(`{"action":"send","id":%q,"message":"Disk 91%% full on db-1"}`, conn)}}},
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bot_connector", Args: `{"action":"send","id":"sms","message":"x"}`}}},
			fakellm.Turn{Text: "Reported."},
		)
		fs := exchange(t, c, frame{"v": 1, "type": "send", "id": agent, "agent": agent, "chat_id": agent, "text": "status?"})
		g.Expect(event(fs, "final")["text"]).To(Equal("Reported."), agent)
		reqs := s.Requests()[before:]
		g.Expect(reqs[0].Tools).To(ContainElements("bot_status", "bot_connector"))
		results := toolResults(reqs[len(reqs)-1])
		g.Expect(results).To(HaveLen(4))

		var st struct {
			Agent     string          `json:"agent"`
			Mode      string          `json:"mode"`
			Model     bot.ModelStatus `json:"model"`
			Instances []bot.Instance  `json:"instances"`
			Queue     *bot.Queue      `json:"queue"`
			Unknown   []string        `json:"unknown"`
		}
		g.Expect(json.Unmarshal([]byte(results[0]), &st)).To(Succeed(), results[0])
		g.Expect(st.Agent).To(Equal(agent))
		g.Expect(st.Mode).To(Equal("embedded"))
		g.Expect(st.Model.State).To(Equal(bot.ModelOK))
		g.Expect(st.Model.Source).To(Equal("spec"))
		g.Expect(st.Model.Says).To(HavePrefix("Using "))
		g.Expect(st.Instances).To(HaveLen(1))
		g.Expect(st.Instances[0].Kind).To(Equal("picobot serve process"))
		g.Expect(st.Instances[0].State).To(Equal("serving 1 chat(s)"))
		g.Expect(st.Queue).To(Equal(&bot.Queue{Waiting: 0, Running: 1}), "the turn asking is the one running")
		g.Expect(st.Unknown).To(BeEmpty())

		g.Expect(results[1]).To(ContainSubstring(fmt.Sprintf(`{"id":%q,"type":"webhook","ready":true,"status":"webhook","chat_id":"ops-room","allowed":[%q]}`, conn, agent)))
		g.Expect(results[2]).To(HavePrefix(fmt.Sprintf("Sent through connector %s to chat ops-room", conn)))
		g.Expect(results[3]).To(ContainSubstring(`no connector "sms"`))
	}
	got := recv.got()
	g.Expect(got).To(HaveLen(2))
	for _, b := range got {
		g.Expect(b).To(HaveKeyWithValue("chat_id", "ops-room"))
		g.Expect(b).To(HaveKeyWithValue("text", "Disk 91% full on db-1"))
	}

	before := len(s.Requests())
	s.Script(fakellm.Turn{Text: "hi"})
	exchange(t, c, frame{"v": 1, "type": "send", "id": "q1", "agent": "quiet", "chat_id": "q1", "text": "hello"})
	g.Expect(s.Requests()[before].Tools).To(Equal([]string{"bot_status"}), "no channels, no bot_connector")
}
