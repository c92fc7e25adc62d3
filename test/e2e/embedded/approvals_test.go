package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// approvalModel is a scripted model for exec approvals: "run X" makes it
// call exec with a command that creates approved-X.txt in the workspace
// (not in the allowlist, so the user is asked); "allowed" calls an
// allowlisted command; "danger" a destructive one. Given the tool's
// result it answers "model saw: <result>".
func approvalModel(r fakellm.Recorded) fakellm.Turn {
	last := r.Messages[len(r.Messages)-1]
	if len(last.ToolResults) > 0 {
		return fakellm.Turn{Text: "model saw: " + last.ToolResults[0].Content}
	}
	text := strings.TrimSpace(last.Content)
	switch {
	case strings.HasPrefix(text, "run "):
		x := strings.TrimPrefix(text, "run ")
		return fakellm.Turn{ToolCalls: []fakellm.Call{call("exec", map[string]any{"command": "touch approved-" + x + ".txt && echo ran-" + x})}}
	case text == "allowed":
		return fakellm.Turn{ToolCalls: []fakellm.Call{call("exec", map[string]any{"command": "echo hello-allowlist"})}}
	case text == "danger":
		return fakellm.Turn{ToolCalls: []fakellm.Call{call("bash", map[string]any{"command": "rm -rf / --no-preserve-root"})}}
	}
	return fakellm.Turn{Text: "?"}
}

// writeApprovalAgent writes an Agent that runs `echo` commands and asks
// about the others, waiting timeout for an answer; extra is appended to its
// spec (channels).
func writeApprovalAgent(tb testing.TB, dir, baseURL, timeout, extra string) {
	tb.Helper()
	writeAgent(tb, dir, baseURL, fmt.Sprintf(`  tools:
    profile: coding
    exec:
      security: allowlist
      ask: on-miss
      allowlist: ["echo *"]
      approvalTimeout: %s
`, timeout), extra)
}

// ranIn reports whether the command of "run x" ran: its file is in a
// session workspace.
func ranIn(dir, x string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, ".picobot", "workspaces", "*", "*", "*", "approved-"+x+".txt"))
	return len(m) > 0
}

// untilEvent reads frames of message id until an event of kind, and returns
// its body and the frames read.
func untilEvent(t *testing.T, ws *gatewaytest.WS, id, kind string) (gatewaytest.Frame, []gatewaytest.Frame) {
	t.Helper()
	var got []gatewaytest.Frame
	for {
		f := ws.Read(t)
		if f["id"] != id {
			continue
		}
		got = append(got, f)
		if ev := gatewaytest.Event([]gatewaytest.Frame{f}, kind); ev != nil {
			return ev, got
		}
		if f["type"] == "done" {
			t.Fatalf("message %s ended without a %s event: %v", id, kind, got)
		}
	}
}

// TestExecApprovalsOverWebSocket drives `picobot serve` with real bash: a
// command outside the allowlist waits for the user, who approves it (it
// runs), denies it (it does not run and the model reads the denial as a tool
// error), or does not answer (a denial after approvalTimeout); the answer
// comes by the approve frame, by the REST API and by a "/approve CODE"
// message from another connection; a code is answered once; allowlisted
// commands run without asking and destructive ones are refused unasked.
func TestExecApprovalsOverWebSocket(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	llm := fakellm.New()
	defer llm.Close()
	llm.Respond(approvalModel)
	writeApprovalAgent(t, dir, llm.URL(), "3s", "")
	p := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	client := gatewaytest.Client{URL: p.url}
	ws := client.Dial(t)
	const chat = "approvals"
	send := func(id, text string) {
		ws.Write(t, gatewaytest.Frame{"type": "send", "id": id, "agent": "assistant", "chat_id": chat, "text": text})
	}
	final := func(frames []gatewaytest.Frame) string {
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "%v", frames)
		return ev["text"].(string)
	}

	// Approved with the approve frame: the command runs.
	send("m1", "run A")
	req, frames := untilEvent(t, ws, "m1", "approval")
	g.Expect(frames[len(frames)-1]).To(HaveKeyWithValue("session", "web:assistant/"+chat+":default"))
	g.Expect(req).To(And(HaveKeyWithValue("name", "exec"), HaveKeyWithValue("command", "touch approved-A.txt && echo ran-A"),
		HaveKeyWithValue("timeout_ms", BeNumerically("==", 3000)), HaveKeyWithValue("reason", ContainSubstring("allowlist")),
		HaveKeyWithValue("code", MatchRegexp(`^[A-Z2-9]{4}$`))))
	g.Expect(ranIn(dir, "A")).To(BeFalse(), "nothing runs before the answer")
	code := req["code"].(string)
	ws.Write(t, gatewaytest.Frame{"type": "approve", "id": "a1", "agent": "assistant", "chat_id": chat, "code": strings.ToLower(code), "decision": "approve"})
	frames = ws.Until(t, "m1", "done")
	g.Expect(final(frames)).To(HavePrefix("model saw: ran-A"))
	g.Expect(gatewaytest.Event(frames, "approval_result")).To(HaveKeyWithValue("outcome", "approved"))
	g.Expect(ranIn(dir, "A")).To(BeTrue())
	// Answering the same code again finds nothing waiting.
	status, body := client.Do(t, http.MethodPost, "/api/v1/approvals", gatewaytest.Frame{"agent": "assistant", "chat_id": chat, "code": code, "decision": "approve"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("answered", false))

	// Denied: the command does not run and the model reads the denial as a
	// tool error.
	send("m2", "run B")
	req, _ = untilEvent(t, ws, "m2", "approval")
	ws.Write(t, gatewaytest.Frame{"type": "approve", "id": "a2", "agent": "assistant", "chat_id": chat, "code": req["code"], "decision": "deny"})
	frames = ws.Until(t, "m2", "done")
	ack := ws.Request(t, gatewaytest.Frame{"type": "approve", "id": "a2b", "agent": "assistant", "chat_id": chat, "code": req["code"], "decision": "deny"})
	g.Expect(ack).To(And(HaveKeyWithValue("type", "approval"), HaveKeyWithValue("answered", false)))
	result := gatewaytest.Event(frames, "tool_result")
	g.Expect(result).To(And(HaveKeyWithValue("is_error", true), HaveKeyWithValue("content", ContainSubstring("the user denied it"))))
	g.Expect(final(frames)).To(ContainSubstring("the command was not run: the user denied it"))
	g.Expect(ranIn(dir, "B")).To(BeFalse())

	// Not answered: a denial once approvalTimeout has passed.
	send("m3", "run C")
	req, _ = untilEvent(t, ws, "m3", "approval")
	frames = ws.Until(t, "m3", "done")
	g.Expect(gatewaytest.Event(frames, "approval_result")).To(HaveKeyWithValue("outcome", "timed_out"))
	g.Expect(final(frames)).To(ContainSubstring("did not answer the approval request within 3s"))
	g.Expect(ranIn(dir, "C")).To(BeFalse())
	status, body = client.Do(t, http.MethodPost, "/api/v1/approvals", gatewaytest.Frame{"agent": "assistant", "chat_id": chat, "code": req["code"], "decision": "approve"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("answered", false))

	// Approved over REST.
	send("m4", "run D")
	req, _ = untilEvent(t, ws, "m4", "approval")
	status, body = client.Do(t, http.MethodPost, "/api/v1/approvals", gatewaytest.Frame{"agent": "assistant", "chat_id": chat, "code": req["code"], "decision": "approve"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("answered", true))
	g.Expect(final(ws.Until(t, "m4", "done"))).To(HavePrefix("model saw: ran-D"))

	// Approved by a message "/approve CODE" from another connection of the
	// same chat; another chat cannot answer it.
	send("m5", "run E")
	req, _ = untilEvent(t, ws, "m5", "approval")
	other := client.Dial(t)
	cmd := other.Exchange(t, gatewaytest.Frame{"id": "x1", "agent": "assistant", "chat_id": "another-chat", "text": "/approve " + req["code"].(string)})
	g.Expect(gatewaytest.Event(cmd, "command")).To(HaveKeyWithValue("text", ContainSubstring("No command is waiting")))
	cmd = other.Exchange(t, gatewaytest.Frame{"id": "x2", "agent": "assistant", "chat_id": chat, "text": "/approve " + req["code"].(string)})
	g.Expect(gatewaytest.Event(cmd, "command")).To(HaveKeyWithValue("text", HavePrefix("Approved")))
	g.Expect(final(ws.Until(t, "m5", "done"))).To(HavePrefix("model saw: ran-E"))

	// Allowlisted: runs without asking.
	frames = ws.Exchange(t, gatewaytest.Frame{"id": "m6", "agent": "assistant", "chat_id": chat, "text": "allowed"})
	g.Expect(gatewaytest.Event(frames, "approval")).To(BeNil())
	g.Expect(final(frames)).To(HavePrefix("model saw: hello-allowlist"))

	// Destructive: refused before running, and nobody is asked.
	frames = ws.Exchange(t, gatewaytest.Frame{"id": "m7", "agent": "assistant", "chat_id": chat, "text": "danger"})
	g.Expect(gatewaytest.Event(frames, "approval")).To(BeNil())
	g.Expect(gatewaytest.Event(frames, "tool_result")).To(And(HaveKeyWithValue("is_error", true),
		HaveKeyWithValue("content", And(ContainSubstring("recursive removal"), ContainSubstring("no sandbox")))))

	// Bad answers are refused with a clear error.
	status, body = client.Do(t, http.MethodPost, "/api/v1/approvals", gatewaytest.Frame{"agent": "assistant", "chat_id": chat, "code": "K7Q2", "decision": "maybe"})
	g.Expect(status).To(Equal(http.StatusBadRequest))
	g.Expect(body).To(HaveKeyWithValue("error", HaveKeyWithValue("message", ContainSubstring(`"approve" or "deny"`))))
	bad := ws.Request(t, gatewaytest.Frame{"type": "approve", "id": "a9", "agent": "assistant", "chat_id": chat, "code": "no", "decision": "approve"})
	g.Expect(bad).To(And(HaveKeyWithValue("type", "error"), HaveKeyWithValue("code", "bad_request")))
}

// TestExecApprovalsOverWebhookChannel: a chat platform's user gets the
// approval request as a message with a short code and answers it with
// "/approve CODE" or "/deny CODE" in the same chat.
func TestExecApprovalsOverWebhookChannel(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	llm.Respond(approvalModel)
	const secret = "hook-signing-secret"
	var mu sync.Mutex
	var got []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ChatID string `json:"chat_id"`
			Text   string `json:"text"`
		}
		_ = json.Unmarshal(body, &m)
		mu.Lock()
		got = append(got, m.ChatID+": "+m.Text)
		id := len(got)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"message_id":"r` + strconv.Itoa(id) + `"}`))
	}))
	t.Cleanup(receiver.Close)
	dir := t.TempDir()
	writeApprovalAgent(t, dir, llm.URL(), "1m", fmt.Sprintf(`  channels:
  - {type: webhook, name: hook, secretRef: {name: hook-secret}}
---
apiVersion: v1
kind: Secret
metadata: {name: hook-secret}
stringData: {signingSecret: %s, url: %s}
`, secret, receiver.URL))
	p := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")

	n := 0
	post := func(text string) {
		n++
		body := fmt.Sprintf(`{"chat_id":"c-7","message_id":"m-%d","text":%q}`, n, text)
		req, _ := http.NewRequest(http.MethodPost, p.url+"/hooks/default/assistant/hook", bytes.NewReader([]byte(body)))
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set(channel.HeaderPicoBotTimestamp, ts)
		req.Header.Set(channel.HeaderPicoBotSignature, channel.WebhookSignature(secret, ts, []byte(body)))
		res, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = res.Body.Close()
		g.Expect(res.StatusCode).To(Equal(http.StatusOK))
	}
	codeRE := regexp.MustCompile(`/approve ([A-Z2-9]{4})`)
	// waitFor returns the first delivered message (from index from) that
	// matches.
	waitFor := func(from int, match func(string) bool) (string, int) {
		var msg string
		var at int
		g.Eventually(func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i := from; i < len(got); i++ {
				if match(got[i]) {
					msg, at = got[i], i
					return true
				}
			}
			return false
		}, 30*time.Second, 50*time.Millisecond).Should(BeTrue(), func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("delivered: %v", got)
		})
		return msg, at
	}

	post("run W")
	prompt, at := waitFor(0, func(s string) bool { return codeRE.MatchString(s) })
	g.Expect(prompt).To(And(HavePrefix("c-7: Approval needed"), ContainSubstring("touch approved-W.txt && echo ran-W"), ContainSubstring("/deny ")))
	g.Expect(ranIn(dir, "W")).To(BeFalse())
	post("/approve " + codeRE.FindStringSubmatch(prompt)[1])
	waitFor(at, func(s string) bool { return strings.HasPrefix(s, "c-7: Approved ") })
	waitFor(at, func(s string) bool { return strings.HasPrefix(s, "c-7: model saw: ran-W") })
	g.Expect(ranIn(dir, "W")).To(BeTrue())

	post("run V")
	prompt, at = waitFor(at+1, func(s string) bool { return codeRE.MatchString(s) && strings.Contains(s, "ran-V") })
	post("/deny " + codeRE.FindStringSubmatch(prompt)[1])
	waitFor(at, func(s string) bool { return strings.HasPrefix(s, "c-7: Denied ") })
	waitFor(at, func(s string) bool {
		return strings.HasPrefix(s, "c-7: model saw: error: the command was not run: the user denied it")
	})
	g.Expect(ranIn(dir, "V")).To(BeFalse())
}
