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
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestWebhookChannelEndToEnd drives `picobot serve` from a chat platform: a
// signed generic-webhook message reaches the agent, the reply is POSTed,
// signed, to the channel's URL, a replay is ignored and a forged signature
// refused; the session holds the turn once.
func TestWebhookChannelEndToEnd(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		return fakellm.Turn{Text: "webhook reply to: " + r.Messages[len(r.Messages)-1].Content}
	})
	const secret = "hook-signing-secret"
	var mu sync.Mutex
	var got []map[string]any
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get(channel.HeaderPicoBotTimestamp)
		if r.Header.Get(channel.HeaderPicoBotSignature) != channel.WebhookSignature(secret, ts, body) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"message_id":"r1"}`))
	}))
	t.Cleanup(receiver.Close)

	dir := t.TempDir()
	writeAgent(t, dir, llm.URL(), "  channels:\n  - {type: webhook, name: hook, secretRef: {name: hook-secret}}\n")
	hookSecret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: hook-secret}\nstringData: {signingSecret: %s, url: %s}\n", secret, receiver.URL)
	g.Expect(os.WriteFile(filepath.Join(dir, "hook-secret.yaml"), []byte(hookSecret), 0o600)).To(Succeed())
	p := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	defer p.stop()

	post := func(body, sig string) int {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/hooks/default/assistant/hook", bytes.NewReader([]byte(body)))
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		if sig == "" {
			sig = channel.WebhookSignature(secret, ts, []byte(body))
		}
		req.Header.Set(channel.HeaderPicoBotTimestamp, ts)
		req.Header.Set(channel.HeaderPicoBotSignature, sig)
		res, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = res.Body.Close()
		return res.StatusCode
	}
	msg := `{"chat_id":"c-42","message_id":"m-1","text":"hello from the platform"}`
	g.Expect(post(msg, "")).To(Equal(http.StatusOK))
	g.Eventually(func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), got...)
	}, 30*time.Second, 50*time.Millisecond).Should(ConsistOf(And(
		HaveKeyWithValue("chat_id", "c-42"),
		HaveKeyWithValue("text", "webhook reply to: hello from the platform"))))

	// A replay is acknowledged and ignored; a forged signature is refused.
	g.Expect(post(msg, "")).To(Equal(http.StatusOK))
	g.Expect(post(`{"chat_id":"c-42","message_id":"m-2","text":"forged"}`, "sha256=00")).To(Equal(http.StatusUnauthorized))
	g.Consistently(func() int { mu.Lock(); defer mu.Unlock(); return len(got) }, 2*time.Second, 100*time.Millisecond).Should(Equal(1))
	g.Expect(llm.Requests()).To(HaveLen(1))

	// The session is the platform's chat, holding the turn once.
	res, err := http.Get(p.url + "/api/v1/sessions/hook:c-42:default/messages")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = res.Body.Close() }()
	var body struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	raw, _ := io.ReadAll(res.Body)
	g.Expect(json.Unmarshal(raw, &body)).To(Succeed(), string(raw))
	g.Expect(res.StatusCode).To(Equal(http.StatusOK), string(raw))
	g.Expect(body.Messages).To(HaveLen(2), string(raw))
	g.Expect(body.Messages[0].Content).To(Equal("hello from the platform"))
	g.Expect(body.Messages[1].Content).To(Equal("webhook reply to: hello from the platform"))
}

// TestMessageToolOverWebhookChannel runs the message tool in `picobot
// serve`: in a conversation that came from a webhook chat, a send to
// another chat is refused (the Agent does not allow cross-chat sends) and
// an action the generic webhook lacks is an error naming the channel; from
// a web chat the same send goes out, POSTed to the channel's URL.
func TestMessageToolOverWebhookChannel(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		user, tools := "", 0
		for _, m := range r.Messages {
			switch m.Role {
			case "user":
				user, tools = m.Content, 0
			case "tool":
				tools++
			}
		}
		send := fakellm.Call{Name: "message", Args: `{"action":"send","channel":"hook","target":"T-9","message":"weekly report"}`}
		switch {
		case user == "report to T-9" && tools == 0:
			return fakellm.Turn{ToolCalls: []fakellm.Call{send}}
		case user == "report to T-9" && tools == 1:
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "message", Args: `{"action":"react","messageId":"m-1","emoji":"eyes"}`}}}
		case user == "report to T-9":
			return fakellm.Turn{Text: "cannot"}
		case user == "web: report to T-9" && tools == 0:
			return fakellm.Turn{ToolCalls: []fakellm.Call{send}}
		}
		return fakellm.Turn{Text: "sent"}
	})
	const secret = "hook-signing-secret"
	var mu sync.Mutex
	var got []map[string]any
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"message_id":"r1"}`))
	}))
	t.Cleanup(receiver.Close)
	received := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), got...)
	}

	dir := t.TempDir()
	writeAgent(t, dir, llm.URL(), "  channels:\n  - {type: webhook, name: hook, secretRef: {name: hook-secret}}\n  - {type: web}\n")
	hookSecret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: hook-secret}\nstringData: {signingSecret: %s, url: %s}\n", secret, receiver.URL)
	g.Expect(os.WriteFile(filepath.Join(dir, "hook-secret.yaml"), []byte(hookSecret), 0o600)).To(Succeed())
	p := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	defer p.stop()

	body := []byte(`{"chat_id":"c-42","message_id":"m-1","text":"report to T-9"}`)
	req, _ := http.NewRequest(http.MethodPost, p.url+"/hooks/default/assistant/hook", bytes.NewReader(body))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set(channel.HeaderPicoBotTimestamp, ts)
	req.Header.Set(channel.HeaderPicoBotSignature, channel.WebhookSignature(secret, ts, body))
	res, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusOK))
	g.Eventually(received, 30*time.Second, 50*time.Millisecond).Should(ConsistOf(And(
		HaveKeyWithValue("chat_id", "c-42"), HaveKeyWithValue("text", "cannot"))), "only the reply, in its own chat")
	reqs := llm.Requests()
	g.Expect(reqs).To(HaveLen(3))
	g.Expect(reqs[0].Tools).To(ContainElement("message"))
	g.Expect(reqs[1].Messages[len(reqs[1].Messages)-1].Content).To(HavePrefix(
		"error: this conversation is the chat hook:c-42, and here message reaches only that chat, not hook:T-9"))
	g.Expect(reqs[2].Messages[len(reqs[2].Messages)-1].Content).To(Equal(
		`error: channel "hook" (webhook) does not support action "react"; it supports send. Nothing was done.`))

	// From a web chat (not a chat platform's) the send goes out.
	reply, err := say(t, p.url, "boss", "w1", "web: report to T-9")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply).To(Equal("sent"))
	g.Expect(received()).To(ContainElement(And(HaveKeyWithValue("chat_id", "T-9"), HaveKeyWithValue("text", "weekly report"))))
	reqs = llm.Requests()
	g.Expect(reqs[len(reqs)-1].Messages[len(reqs[len(reqs)-1].Messages)-1].Content).To(HavePrefix("Delivered to hook:T-9 (session hook:T-9:default, 1 attempt(s))"))
}
