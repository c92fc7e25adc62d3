package gatewaytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // Gomega's DSL is made for dot-import

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// Target is a running gateway that serves two tenants.
type Target struct {
	// URL is the gateway's base URL.
	URL string
	// KeyA and KeyB are API keys of two different tenants.
	KeyA, KeyB string
	// Agent is an agent both tenants may talk to, answered by LLM.
	Agent string
	// LLM is the fake model behind Agent. The suite sets its responder.
	LLM *fakellm.Server
}

// Markers in the texts of each tenant: tenant B must never see markA.
const (
	markA = "alpha-secret"
	markB = "bravo"
	chat  = "shared-chat" // both tenants use the same agent and chat id
	// slowMark makes the model answer slowly, so a turn is still running
	// when tenant B tries to stop it.
	slowMark = "[answer slowly]"
)

// seeded is what tenant A created.
type seeded struct {
	sessions []string // session ids
	dialogs  []string // web dialog ids: default, a created one, an archived one
	artifact string   // id of A's /dump
	clientID []string // client message ids A used
}

// RunIsolation seeds tenant A through the API (messages over WebSocket, REST
// and the OpenAI endpoint, dialogs created, renamed and archived, a /dump
// artifact), then proves that tenant B's key can neither read nor change any
// of it through every endpoint — REST, WebSocket send, stop and dialog
// operations, slash commands, the OpenAI endpoint — that the model never
// sees A's text in B's turns, that B cannot stop A's running turn, and that
// A's data is unchanged afterwards.
//
// It runs against any gateway: embedded mode (runtime/embedded) or cluster
// mode, given two keys of different tenants.
func RunIsolation(t *testing.T, tg Target) {
	tg.LLM.Respond(func(rec fakellm.Recorded) fakellm.Turn {
		last := lastUser(rec)
		if strings.Contains(last, slowMark) {
			return fakellm.Turn{Text: strings.Repeat("tick ", 60), ChunkDelay: 10 * time.Millisecond}
		}
		return fakellm.Turn{Text: "reply to: " + last}
	})
	a, b := Client{URL: tg.URL, Key: tg.KeyA}, Client{URL: tg.URL, Key: tg.KeyB}
	seed := seedA(t, tg, a, b)
	before := snapshot(t, tg, a, seed)

	t.Run("REST", func(t *testing.T) { restIsolation(t, tg, a, b, seed) })
	t.Run("WebSocket", func(t *testing.T) { wsIsolation(t, tg, a, b, seed) })
	t.Run("OpenAI", func(t *testing.T) { openAIIsolation(t, tg, b) })
	t.Run("ModelNeverSawTenantA", func(t *testing.T) {
		g := NewWithT(t)
		n := 0
		for _, rec := range tg.LLM.Requests() {
			if !strings.Contains(lastUser(rec), markB) {
				continue
			}
			n++
			for _, m := range rec.Messages {
				g.Expect(m.Content).NotTo(ContainSubstring(markA), "a turn of tenant B sent tenant A's text to the model")
			}
			g.Expect(rec.System).NotTo(ContainSubstring(markA))
		}
		g.Expect(n).To(BeNumerically(">=", 6), "tenant B's turns reached the model")
	})
	t.Run("TenantAUnchanged", func(t *testing.T) {
		NewWithT(t).Expect(snapshot(t, tg, a, seed)).To(Equal(before))
	})
}

func lastUser(rec fakellm.Recorded) string {
	for i := len(rec.Messages) - 1; i >= 0; i-- {
		if rec.Messages[i].Role == "user" {
			return rec.Messages[i].Content
		}
	}
	return ""
}

var artifactLink = regexp.MustCompile(`/api/v1/artifacts/([A-Za-z0-9_-]+)`)

func dialogPath(tg Target, dialog, suffix string) string {
	return "/api/v1/dialogs/" + url.PathEscape(dialog) + suffix + "?agent=" + url.QueryEscape(tg.Agent) + "&chat_id=" + chat
}

func messagesPath(session string) string {
	return "/api/v1/sessions/" + url.PathEscape(session) + "/messages?last=500"
}

// seedA writes tenant A's data, and checks on the way that B cannot stop A's
// running turn.
func seedA(t *testing.T, tg Target, a, b Client) seeded {
	t.Helper()
	g := NewWithT(t)
	var s seeded
	ws := a.Dial(t)
	send := func(id, text string) []Frame {
		fs := ws.Exchange(t, Frame{"id": id, "agent": tg.Agent, "chat_id": chat, "text": text})
		g.Expect(ErrorFrame(fs)).To(BeNil(), "tenant A's send %q", text)
		s.clientID = append(s.clientID, id)
		return fs
	}
	fs := send("a1", markA+"-1 over the WebSocket")
	g.Expect(Event(fs, "final")).To(HaveKeyWithValue("text", "reply to: "+markA+"-1 over the WebSocket"))
	s.sessions = append(s.sessions, fs[len(fs)-1]["session"].(string))
	s.dialogs = append(s.dialogs, "default")

	status, body := a.Do(t, http.MethodPost, "/api/v1/send", Frame{"id": "a-rest-1", "agent": tg.Agent, "chat_id": chat, "text": markA + "-2 over REST"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	s.clientID = append(s.clientID, "a-rest-1")

	d := ws.Request(t, Frame{"type": "dialog", "id": "a-d1", "op": "create", "agent": tg.Agent, "chat_id": chat, "title": markA + " dialog"})
	g.Expect(d["type"]).To(Equal("dialog"), "%v", d)
	created := d["dialog"].(map[string]any)
	s.dialogs = append(s.dialogs, created["dialog_id"].(string))
	s.sessions = append(s.sessions, created["id"].(string))
	send("a2", markA+"-3 in the second dialog")
	fs = send("a3", "/dump")
	m := artifactLink.FindStringSubmatch(fmt.Sprint(Event(fs, "command")["text"]))
	g.Expect(m).NotTo(BeNil(), "/dump links its artifact: %v", fs)
	s.artifact = m[1]

	status, body = a.Do(t, http.MethodPost, "/api/v1/dialogs?agent="+tg.Agent+"&chat_id="+chat, Frame{"title": markA + " archived"})
	g.Expect(status).To(Equal(http.StatusCreated), "%v", body)
	third := body["dialog"].(map[string]any)
	s.dialogs = append(s.dialogs, third["dialog_id"].(string))
	s.sessions = append(s.sessions, third["id"].(string))
	status, body = a.Do(t, http.MethodPost, dialogPath(tg, s.dialogs[2], "/archive"), nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	status, body = a.Do(t, http.MethodPost, dialogPath(tg, s.dialogs[1], "/switch"), nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)

	res, err := a.Request(http.MethodPost, "/v1/chat/completions",
		Frame{"model": tg.Agent, "user": chat, "messages": []Frame{{"role": "user", "content": markA + "-4 over OpenAI"}}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusOK), "%s", res.Body)
	s.sessions = append(s.sessions, res.Header.Get("X-PicoBot-Session"))
	g.Expect(s.sessions[len(s.sessions)-1]).To(HavePrefix("openai:"))

	// B cannot stop A's running turn.
	ws.Write(t, Frame{"type": "send", "id": "a-slow", "agent": tg.Agent, "chat_id": chat, "text": markA + "-5 " + slowMark})
	s.clientID = append(s.clientID, "a-slow")
	var frames []Frame
	for Event(frames, "delta") == nil {
		frames = append(frames, ws.Until(t, "a-slow", "event")...)
		g.Expect(ErrorFrame(frames)).To(BeNil())
	}
	bws := b.Dial(t)
	stopped := bws.Request(t, Frame{"type": "stop", "id": "b-stop", "agent": tg.Agent, "chat_id": chat})
	g.Expect(stopped).To(HaveKeyWithValue("stopped", false))
	status, body = b.Do(t, http.MethodPost, "/api/v1/stop", Frame{"agent": tg.Agent, "chat_id": chat})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body).To(HaveKeyWithValue("stopped", false))
	fs = bws.Exchange(t, Frame{"id": "b-stop-cmd", "agent": tg.Agent, "chat_id": chat, "text": "/stop"})
	g.Expect(Event(fs, "command")).To(HaveKeyWithValue("text", "Nothing is running."))
	frames = append(frames, ws.Until(t, "a-slow", "done")...)
	g.Expect(ErrorFrame(frames)).To(BeNil(), "tenant A's turn was not stopped")
	g.Expect(Event(frames, "final")).To(HaveKeyWithValue("text", strings.Repeat("tick ", 60)))
	return s
}

// snapshot is everything tenant A can read of its data.
func snapshot(t *testing.T, tg Target, a Client, s seeded) Frame {
	t.Helper()
	g := NewWithT(t)
	out := Frame{}
	for _, ch := range []string{"web", "openai"} {
		status, body := a.Do(t, http.MethodGet, "/api/v1/dialogs?agent="+tg.Agent+"&chat_id="+chat+"&channel="+ch, nil)
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
		delete(body, "sessions") // the same list again
		out["dialogs "+ch] = body
	}
	for _, id := range s.sessions {
		status, body := a.Do(t, http.MethodGet, messagesPath(id), nil)
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
		out["messages "+id] = body
	}
	status, raw := a.Raw(t, http.MethodGet, "/api/v1/artifacts/"+s.artifact, nil)
	g.Expect(status).To(Equal(http.StatusOK))
	out["artifact"] = string(raw)
	return out
}

func expectCode(g Gomega, status int, body Frame, wantStatus int, code string) {
	g.ExpectWithOffset(1, status).To(Equal(wantStatus), "%v", body)
	e, _ := body["error"].(map[string]any)
	g.ExpectWithOffset(1, e).To(HaveKeyWithValue("code", code), "%v", body)
}

func restIsolation(t *testing.T, tg Target, a, b Client, s seeded) {
	g := NewWithT(t)
	for _, id := range s.sessions {
		status, body := b.Do(t, http.MethodGet, messagesPath(id), nil)
		expectCode(g, status, body, http.StatusNotFound, "unknown_session")
	}
	status, body := b.Do(t, http.MethodGet, "/api/v1/artifacts/"+s.artifact, nil)
	expectCode(g, status, body, http.StatusNotFound, "unknown_artifact")
	status, body = Client{URL: tg.URL}.Do(t, http.MethodGet, "/api/v1/artifacts/"+s.artifact+"?key="+url.QueryEscape(tg.KeyB), nil)
	expectCode(g, status, body, http.StatusNotFound, "unknown_artifact")

	// B's view of the same chat holds none of A's dialogs (at most B's own
	// default one, which B's stop attempts may have started).
	for _, path := range []string{"/api/v1/dialogs", "/api/v1/sessions"} {
		for _, ch := range []string{"web", "openai"} {
			status, body = b.Do(t, http.MethodGet, path+"?agent="+tg.Agent+"&chat_id="+chat+"&channel="+ch, nil)
			g.Expect(status).To(Equal(http.StatusOK))
			g.Expect(fmt.Sprint(body)).NotTo(ContainSubstring(markA))
			for _, d := range body["dialogs"].([]any) {
				g.Expect(d).To(HaveKeyWithValue("dialog_id", "default"))
			}
		}
	}
	// B cannot act on A's dialogs.
	for _, d := range s.dialogs[1:] {
		status, body = b.Do(t, http.MethodPost, dialogPath(tg, d, "/switch"), nil)
		expectCode(g, status, body, http.StatusNotFound, "unknown_dialog")
		status, body = b.Do(t, http.MethodPatch, dialogPath(tg, d, ""), Frame{"title": markB + " took over"})
		expectCode(g, status, body, http.StatusNotFound, "unknown_dialog")
		status, body = b.Do(t, http.MethodPost, dialogPath(tg, d, "/archive"), nil)
		expectCode(g, status, body, http.StatusNotFound, "unknown_dialog")
		status, body = b.Do(t, http.MethodDelete, dialogPath(tg, d, ""), nil)
		expectCode(g, status, body, http.StatusNotFound, "unknown_dialog")
	}
	// B's sends land in B's own sessions, even with A's message ids.
	for _, id := range s.clientID {
		status, body = b.Do(t, http.MethodPost, "/api/v1/send", Frame{"id": id, "agent": tg.Agent, "chat_id": chat, "text": markB + " REST " + id})
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
		g.Expect(body["duplicate"]).To(BeFalse(), "tenant A's message id %q deduplicated tenant B's message", id)
		g.Expect(body["text"]).To(Equal("reply to: " + markB + " REST " + id))
	}
	status, body = b.Do(t, http.MethodGet, "/api/v1/dialogs?agent="+tg.Agent+"&chat_id="+chat, nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(fmt.Sprint(body)).NotTo(ContainSubstring(markA))
	g.Expect(body["dialogs"]).To(HaveLen(1), "only B's own dialog")
	// A cannot read B's either.
	for _, dl := range body["dialogs"].([]any) {
		status, body = a.Do(t, http.MethodGet, messagesPath(dl.(map[string]any)["id"].(string)), nil)
		g.Expect(status).To(Equal(http.StatusOK), "A has a session of the same id, its own")
		g.Expect(fmt.Sprint(body)).NotTo(ContainSubstring(markB))
	}
}

func wsIsolation(t *testing.T, tg Target, a, b Client, s seeded) {
	g := NewWithT(t)
	ws := b.Dial(t)
	list := ws.Request(t, Frame{"type": "dialog", "id": "l1", "op": "list", "agent": tg.Agent, "chat_id": chat})
	g.Expect(list["type"]).To(Equal("dialog"))
	g.Expect(fmt.Sprint(list)).NotTo(ContainSubstring(markA))
	for i, d := range s.dialogs[1:] {
		for _, op := range []string{"switch", "rename", "archive", "delete"} {
			id := fmt.Sprintf("op-%d-%s", i, op)
			r := ws.Request(t, Frame{"type": "dialog", "id": id, "op": op, "agent": tg.Agent, "chat_id": chat, "dialog_id": d, "title": markB})
			g.Expect(r["type"]).To(Equal("error"), "%s of tenant A's dialog %s: %v", op, d, r)
			g.Expect(r["code"]).To(Equal("unknown_dialog"))
		}
	}
	// A new dialog, so that B's own earlier REST messages with these ids do
	// not deduplicate them.
	fs := ws.Exchange(t, Frame{"id": "n0", "agent": tg.Agent, "chat_id": chat, "text": "/new"})
	g.Expect(ErrorFrame(fs)).To(BeNil())
	for _, id := range s.clientID {
		fs := ws.Exchange(t, Frame{"id": id, "agent": tg.Agent, "chat_id": chat, "text": markB + " WS " + id})
		g.Expect(ErrorFrame(fs)).To(BeNil())
		g.Expect(Event(fs, "final")).To(HaveKeyWithValue("text", "reply to: "+markB+" WS "+id))
	}
	command := func(id, text string) string {
		fs := ws.Exchange(t, Frame{"id": id, "agent": tg.Agent, "chat_id": chat, "text": text})
		g.Expect(ErrorFrame(fs)).To(BeNil())
		reply := fmt.Sprint(Event(fs, "command")["text"])
		g.Expect(reply).NotTo(ContainSubstring(markA), "%s", text)
		return reply
	}
	command("c1", "/sessions")
	command("c2", "/info")
	for _, d := range s.dialogs[1:] {
		g.Expect(command("c3-"+d, "/switch "+d)).To(ContainSubstring("no conversation"))
	}
	m := artifactLink.FindStringSubmatch(command("c4", "/dump"))
	g.Expect(m).NotTo(BeNil())
	status, raw := b.Raw(t, http.MethodGet, "/api/v1/artifacts/"+m[1], nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(string(raw)).To(ContainSubstring(markB))
	g.Expect(string(raw)).NotTo(ContainSubstring(markA))
	status, _ = a.Raw(t, http.MethodGet, "/api/v1/artifacts/"+m[1], nil)
	g.Expect(status).To(Equal(http.StatusNotFound), "tenant A cannot read tenant B's artifact either")
	command("c5", "/rename "+markB+" renamed")
	command("c6", "/new")
	command("c7", "/delete")
	stopped := ws.Request(t, Frame{"type": "stop", "id": "s1", "agent": tg.Agent, "chat_id": chat})
	g.Expect(stopped).To(HaveKeyWithValue("stopped", false))
}

func openAIIsolation(t *testing.T, tg Target, b Client) {
	g := NewWithT(t)
	history := []Frame{
		{"role": "system", "content": "be brief"},
		{"role": "user", "content": "earlier question"},
		{"role": "assistant", "content": "earlier answer"},
	}
	ask := func(text string, stream bool, header http.Header, user string) string {
		req := Frame{"model": tg.Agent, "messages": append(append([]Frame{}, history...), Frame{"role": "user", "content": text}), "stream": stream}
		if user != "" {
			req["user"] = user
		}
		res, err := b.Request(http.MethodPost, "/v1/chat/completions", req, header)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(http.StatusOK), "%s", res.Body)
		data := res.Body
		if !stream {
			var got struct {
				Choices []struct {
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
			}
			g.Expect(json.Unmarshal(data, &got)).To(Succeed())
			g.Expect(got.Choices).To(HaveLen(1))
			return got.Choices[0].Message.Content
		}
		var streamed strings.Builder
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || line == "[DONE]" {
				continue
			}
			var chunk struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
			}
			g.Expect(json.Unmarshal([]byte(line), &chunk)).To(Succeed())
			for _, c := range chunk.Choices {
				streamed.WriteString(c.Delta.Content)
			}
		}
		return streamed.String()
	}
	g.Expect(ask(markB+" openai 1", false, nil, chat)).To(Equal("reply to: " + markB + " openai 1"))
	g.Expect(ask(markB+" openai 2", true, nil, chat)).To(Equal("reply to: " + markB + " openai 2"))
	g.Expect(ask(markB+" openai 3", false, http.Header{"X-Picobot-Chat-Id": {chat}}, "")).To(Equal("reply to: " + markB + " openai 3"))
	g.Expect(ask("/sessions", false, nil, chat)).NotTo(ContainSubstring(markA))
	g.Expect(ask("/info", false, nil, chat)).NotTo(ContainSubstring(markA))
}
