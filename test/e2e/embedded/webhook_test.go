package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/channel"
)

// hookChat is picobot serve running backgroundAgents' assistant with the
// given tool allowlist on a signed webhook channel, whose platform is a
// local receiver that records the texts delivered to it.
type hookChat struct {
	p      *serveProc
	secret string
	mu     sync.Mutex
	got    []string
}

// startHookChat starts it against the fake model at llmURL; allow is the
// assistant's tool allowlist, e.g. "calculator".
func startHookChat(t *testing.T, llmURL, allow string) *hookChat {
	t.Helper()
	g := NewWithT(t)
	h := &hookChat{secret: "hook-signing-secret"}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(channel.HeaderPicoBotSignature) != channel.WebhookSignature(h.secret, r.Header.Get(channel.HeaderPicoBotTimestamp), body) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var m struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(body, &m)
		h.mu.Lock()
		h.got = append(h.got, m.Text)
		h.mu.Unlock()
		_, _ = w.Write([]byte(`{"message_id":"r1"}`))
	}))
	t.Cleanup(receiver.Close)
	dir := t.TempDir()
	agents := fmt.Sprintf(backgroundAgents, llmURL)
	agents = strings.Replace(agents, "  tools: {allow: [calculator]}\n  delegates:",
		"  tools: {allow: ["+allow+"]}\n  channels:\n  - {type: webhook, name: hook, secretRef: {name: hook-secret}}\n  delegates:", 1)
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), []byte(agents), 0o600)).To(Succeed())
	hookSecret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: hook-secret}\nstringData: {signingSecret: %s, url: %s}\n", h.secret, receiver.URL)
	g.Expect(os.WriteFile(filepath.Join(dir, "hook-secret.yaml"), []byte(hookSecret), 0o600)).To(Succeed())
	h.p = serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	return h
}

// post sends a signed webhook message (body: the channel's JSON) and
// expects it accepted.
func (h *hookChat) post(t *testing.T, body string) {
	t.Helper()
	g := NewWithT(t)
	req, _ := http.NewRequest(http.MethodPost, h.p.url+"/hooks/default/assistant/hook", bytes.NewReader([]byte(body)))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set(channel.HeaderPicoBotTimestamp, ts)
	req.Header.Set(channel.HeaderPicoBotSignature, channel.WebhookSignature(h.secret, ts, []byte(body)))
	res, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusOK))
}

// replies are the texts the platform has received, in order.
func (h *hookChat) replies() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}
