package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestSessionToolsAnnounceOverWebhookChannel runs `picobot serve` with a
// webhook chat: of two sessions_spawn runs started there, the one whose
// announce step (the continuation turn) replies ANNOUNCE_SKIP is not
// delivered to the platform, the other is, once. Then a web chat of the
// same agent finds the webhook chat with sessions_list and sessions_sends
// to it twice: the announce step's reply is delivered to the platform, and
// an ANNOUNCE_SKIP one is not; the turns before it never are.
func TestSessionToolsAnnounceOverWebhookChannel(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		call := func(name, args string) fakellm.Turn {
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "s1", Name: name, Args: args}}}
		}
		switch {
		case strings.HasPrefix(r.System, "You are researcher."):
			return fakellm.Turn{Text: "the answer is 42"}
		case strings.HasPrefix(last.Content, "[Background run ") && strings.Contains(last.Content, "Label: quiet"):
			return fakellm.Turn{Text: "ANNOUNCE_SKIP"}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "ANNOUNCED loud"}
		case strings.HasPrefix(last.Content, "[Message from agent"):
			return fakellm.Turn{Text: "noted"}
		case strings.HasPrefix(last.Content, "[Reply from agent"):
			return fakellm.Turn{Text: "REPLY_SKIP"}
		case strings.HasPrefix(last.Content, "[Announce step") && strings.Contains(last.Content, "SILENT"):
			return fakellm.Turn{Text: "ANNOUNCE_SKIP"}
		case strings.HasPrefix(last.Content, "[Announce step"):
			return fakellm.Turn{Text: "HEADS UP: deploy at 5"}
		case last.Role == "tool" && strings.Contains(last.Content, `"sessions":`):
			var l struct {
				Sessions []struct {
					Session string `json:"session"`
					Kind    string `json:"kind"`
				} `json:"sessions"`
			}
			_ = json.Unmarshal([]byte(last.Content), &l)
			hook := ""
			for _, x := range l.Sessions {
				if x.Kind != "web" {
					hook = x.Session
				}
			}
			text := r.Messages[len(r.Messages)-3].Content // the user's message before the sessions_list call
			return call("sessions_send", fmt.Sprintf(`{"sessionKey":%q,"message":%q,"timeoutSeconds":60,"maxPingPongTurns":1}`, hook, text))
		case last.Role == "tool":
			return fakellm.Turn{Text: "started"}
		case strings.HasPrefix(last.Content, "probe"):
			return fakellm.Turn{Text: "probed " + last.Content}
		case strings.HasPrefix(last.Content, "tell"):
			return call("sessions_list", `{}`)
		case strings.HasPrefix(last.Content, "spawn"):
			label := strings.TrimPrefix(last.Content, "spawn ")
			return call("sessions_spawn", fmt.Sprintf(`{"task":"find the answer","agentId":"researcher","label":%q}`, label))
		}
		return fakellm.Turn{Text: "?"}
	})
	h := startHookChat(t, s.URL(), "calculator, sessions_spawn, sessions_send, sessions_list")
	n := 0
	post := func(text string) {
		n++
		h.post(t, fmt.Sprintf(`{"chat_id":"c-7","message_id":"m-%d","text":%q}`, n, text))
	}
	replies := h.replies
	seen := func(prefix string) func() int {
		return func() int {
			c := 0
			for _, r := range s.Requests() {
				if last := r.Messages[len(r.Messages)-1]; strings.HasPrefix(last.Content, prefix) {
					c++
				}
			}
			return c
		}
	}
	// Each probe is answered after everything the chat had queued before
	// it, so the replies before it are final.
	post("spawn quiet")
	g.Eventually(seen("[Background run ")).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(1))
	post("probe 1")
	g.Eventually(replies, 30*time.Second, 20*time.Millisecond).Should(ContainElement("probed probe 1"))
	post("spawn loud")
	g.Eventually(replies, 30*time.Second, 20*time.Millisecond).Should(ContainElement("ANNOUNCED loud"))
	g.Expect(replies()).To(Equal([]string{"started", "probed probe 1", "started", "ANNOUNCED loud"}), "the quiet announcement stayed back")

	web := func(id, text string) string {
		body, _ := json.Marshal(map[string]string{"id": id, "agent": "assistant", "chat_id": "desk", "text": text})
		res, err := http.Post(h.p.url+"/api/v1/send", "application/json", bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = res.Body.Close() }()
		var out struct {
			Text string `json:"text"`
		}
		g.Expect(json.NewDecoder(res.Body).Decode(&out)).To(Succeed())
		return out.Text
	}
	g.Expect(web("w1", "tell deploy at 5")).To(Equal("started"), "the tool answered ok (the model's reply to any tool result)")
	g.Eventually(replies, 30*time.Second, 20*time.Millisecond).Should(ContainElement("HEADS UP: deploy at 5"))
	g.Expect(web("w2", "tell SILENT deploy moved")).To(Equal("started"))
	g.Eventually(seen("[Announce step")).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(2))
	post("probe 2")
	g.Eventually(replies, 30*time.Second, 20*time.Millisecond).Should(ContainElement("probed probe 2"))
	g.Expect(replies()).To(Equal([]string{"started", "probed probe 1", "started", "ANNOUNCED loud", "HEADS UP: deploy at 5", "probed probe 2"}),
		"only the announcements went to the platform: not the exchange's turns, not the ANNOUNCE_SKIP one")
}
