package webui

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// canvasAgent writes an agent whose only tool is canvas and whose model
// takes images (the snapshot's image part).
func canvasAgent(t testing.TB, dir, modelURL string) {
	t.Helper()
	yaml := `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  model: {provider: openai, model: fake, vision: true, baseURL: ` + modelURL + `, apiKeySecretRef: {name: model-api-key, key: apiKey}}
  tools:
    allow: [canvas]
`
	if err := os.WriteFile(filepath.Join(dir, "assistant.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatalf("failed to write agent manifest: %v", err)
	}
}

// formJSONL is an A2UI v0.8 surface: a card with a heading, a text field
// bound to /form/name and a button whose action carries it.
const formJSONL = `{"surfaceUpdate":{"surfaceId":"signup","components":[` +
	`{"id":"root","component":{"Card":{"child":"col"}}},` +
	`{"id":"col","component":{"Column":{"children":{"explicitList":["title","name","go"]}}}},` +
	`{"id":"title","component":{"Text":{"text":{"literalString":"Pick a name"},"usageHint":"h2"}}},` +
	`{"id":"name","component":{"TextField":{"label":{"literalString":"Name"},"text":{"path":"/form/name"}}}},` +
	`{"id":"go-label","component":{"Text":{"text":{"literalString":"Submit"}}}},` +
	`{"id":"go","component":{"Button":{"child":"go-label","primary":true,"action":{"name":"submit","context":[{"key":"name","value":{"path":"/form/name"}}]}}}}]}}
{"dataModelUpdate":{"surfaceId":"signup","contents":[{"key":"form","valueMap":[{"key":"name","valueString":"Bob"}]}]}}
{"beginRendering":{"surfaceId":"signup","root":"root"}}`

// isolationProbe is what eval runs in the canvas: every way to the chat
// page's DOM, storage, cookies, key and API, each reported as reached or
// refused.
const isolationProbe = `(async () => {
  const r = { origin: String(window.origin) };
  const probe = async (name, fn) => { try { r[name] = 'READ ' + JSON.stringify(await fn()); } catch (e) { r[name] = 'refused ' + e.name; } };
  await probe('parentDOM', () => window.parent.document.title);
  await probe('topDOM', () => window.top.document.getElementById('chat-id').textContent);
  await probe('localStorage', () => window.localStorage.getItem('picobot.chatId'));
  await probe('sessionStorage', () => window.sessionStorage.length);
  await probe('cookie', () => document.cookie);
  await probe('fetch', () => fetch('/api/v1/agents').then((x) => x.status));
  await probe('indexedDB', () => new Promise((ok, no) => { const q = indexedDB.open('x'); q.onsuccess = () => ok('opened'); q.onerror = () => no(q.error); }));
  return r;
})()`

// shotsDir is $PICOBOT_SCREENSHOTS when set, else a temporary folder.
func shotsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("PICOBOT_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("failed to create screenshot folder: %v", err)
	}
	return dir
}

// toolResult finds the result of call id among the requests the fake model
// received (OpenAI's protocol has no error flag: an error result's text
// starts with "error").
func toolResult(llm *fakellm.Server, id string) (fakellm.ToolResult, bool) {
	for _, r := range llm.Requests() {
		for _, m := range r.Messages {
			for _, tr := range m.ToolResults {
				if tr.CallID == id {
					return tr, true
				}
			}
		}
	}
	return fakellm.ToolResult{}, false
}

// TestWebUICanvas drives the canvas panel through the canvas tool in
// headless Chromium against `picobot serve`: present and an A2UI surface
// whose button click reaches the model as a message with the surface's
// data; eval in the sandboxed frame, which cannot reach the chat page's
// DOM, storage, cookies or API; a snapshot that returns an image to the
// model; navigate (a refused loopback URL, an allowed public one); A2UI
// v0.9 refused with its line; argument errors returned to the model; the
// canvas restored from the conversation after a reload; hide.
func TestWebUICanvas(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	canvasAgent(t, dir, llm.URL())
	srv := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	u := openUI(t, launchBrowser(t), srv.url+"/", shotsDir(t))
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	g.Expect(u.eval(`() => document.getElementById('canvas-panel').hidden`).Bool()).To(BeTrue(), "no canvas before the agent presents one")

	call := func(id, args string) fakellm.Call { return fakellm.Call{ID: id, Name: "canvas", Args: args} }
	push, _ := json.Marshal(map[string]string{"action": "a2ui_push", "jsonl": formJSONL})

	// present + a2ui_push: the surface is rendered as components.
	llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_present", `{"action":"present"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_push", string(push))}},
		fakellm.Turn{Text: "The form is on the canvas."},
	)
	u.send("show me a form")
	u.waitLastTurn("done")
	u.wait("the canvas panel", `() => !document.getElementById('canvas-panel').hidden`)
	surface := `#canvas-surfaces section.a2ui-surface[data-surface-id="signup"]`
	g.Expect(u.text(surface + ` h2.a2ui-Text[data-id="title"]`)).To(Equal("Pick a name"))
	g.Expect(u.eval(`(sel) => document.querySelector(sel + ' .a2ui-TextField input').value`, surface).Str()).To(Equal("Bob"), "bound to the data model")
	g.Expect(u.text(surface + ` button.a2ui-Button[data-id="go"]`)).To(Equal("Submit"))
	res, _ := toolResult(llm, "c_push")
	g.Expect(res.Content).NotTo(HavePrefix("error"))
	g.Expect(res.Content).To(Equal("Pushed 3 A2UI message(s) to the canvas."))
	u.shot("canvas-form")

	// A click on the button reaches the model as a message carrying the
	// userAction with the field's value.
	llm.Script(fakellm.Turn{Text: "Thanks, Ada."})
	before := len(llm.Requests())
	field := u.el(surface + ` .a2ui-TextField input`)
	field.MustSelectAllText().MustInput("Ada")
	u.click(surface + ` button.a2ui-Button[data-id="go"]`)
	u.waitLastTurn("done")
	reqs := llm.Requests()
	g.Expect(len(reqs)).To(BeNumerically(">", before))
	msgs := reqs[len(reqs)-1].Messages
	last := msgs[len(msgs)-1]
	g.Expect(last.Role).To(Equal("user"))
	g.Expect(last.Content).To(HavePrefix("[canvas action] "))
	var action struct {
		UserAction struct {
			Name, SurfaceID, SourceComponentID string
			Context                            map[string]any
		}
	}
	g.Expect(json.Unmarshal([]byte(strings.TrimPrefix(last.Content, "[canvas action] ")), &action)).To(Succeed(), last.Content)
	g.Expect(action.UserAction.Name).To(Equal("submit"))
	g.Expect(action.UserAction.SurfaceID).To(Equal("signup"))
	g.Expect(action.UserAction.SourceComponentID).To(Equal("go"))
	g.Expect(action.UserAction.Context).To(HaveKeyWithValue("name", "Ada"))

	// eval runs in the sandboxed frame: it returns its value, and nothing
	// of the chat page is within its reach.
	evalArgs, _ := json.Marshal(map[string]string{"action": "eval", "javaScript": isolationProbe})
	draw, _ := json.Marshal(map[string]string{"action": "eval", "javaScript": `document.body.innerHTML = '<h1 style="color:#c00000;font-size:40px">Hello canvas</h1>'; document.body.textContent.length`})
	llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_probe", string(evalArgs))}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_draw", string(draw))}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_snap", `{"action":"snapshot"}`)}},
		fakellm.Turn{Text: "Here is the canvas."},
	)
	u.send("probe the canvas")
	u.waitLastTurn("done")
	res, _ = toolResult(llm, "c_probe")
	g.Expect(res.Content).NotTo(HavePrefix("error"))
	probe := strings.TrimPrefix(res.Content, "Result (from code run in the canvas; untrusted):\n")
	var reach map[string]string
	g.Expect(json.Unmarshal([]byte(probe), &reach)).To(Succeed(), res.Content)
	g.Expect(reach).To(HaveKeyWithValue("origin", "null"), "the frame runs in an opaque origin")
	for _, k := range []string{"parentDOM", "topDOM", "localStorage", "sessionStorage", "cookie", "fetch", "indexedDB"} {
		g.Expect(reach[k]).To(HavePrefix("refused "), "%s: %s", k, reach[k])
	}
	res, _ = toolResult(llm, "c_draw")
	g.Expect(res.Content).To(HaveSuffix("\n12"))

	// snapshot: an image part for the model and an attachment of the reply.
	res, _ = toolResult(llm, "c_snap")
	g.Expect(res.Content).NotTo(HavePrefix("error"))
	g.Expect(res.Content).To(MatchRegexp(`(?s)^Snapshot of the canvas canvas-\S+\.png \(\d+ KiB\), attached to the reply\.\nMEDIA:canvas-\S+\.png`))
	images := 0
	for _, m := range llm.Requests()[len(llm.Requests())-1].Messages {
		images += m.Images
	}
	g.Expect(images).To(BeNumerically(">=", 1), "the snapshot reaches the model as an image")
	u.wait("the snapshot shown with the tool call", `() => !!document.querySelector('#messages .turn:last-child .tool-media img')`)
	g.Expect(u.eval(`() => { const i = document.querySelector('#messages .turn:last-child .tool-media img'); return i.naturalWidth > 100 && i.naturalHeight > 100; }`).Bool()).To(BeTrue())
	u.shot("canvas-snapshot")

	// navigate: the browser's URL policy refuses loopback; a public page
	// is opened in the frame.
	v09 := `{"surfaceUpdate":{"surfaceId":"x","components":[{"id":"t","component":{"Text":{"text":{"literalString":"hi"}}}}]}}` + "\n" +
		`{"createSurface":{"surfaceId":"x","catalogId":"standard"}}`
	v09Args, _ := json.Marshal(map[string]string{"action": "a2ui_push", "jsonl": v09})
	llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_local", `{"action":"navigate","url":"http://127.0.0.1:8080/admin"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_v09", string(v09Args))}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_noscript", `{"action":"eval"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_extra", `{"action":"hide","url":"https://example.com/"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_enum", `{"action":"fly"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_nav", `{"action":"navigate","url":"https://1.1.1.1/"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_evalnav", `{"action":"eval","javaScript":"1+1"}`)}},
		fakellm.Turn{Text: "Navigated."},
	)
	u.send("open pages")
	u.waitLastTurn("done")
	for id, want := range map[string]string{
		"c_local":    "refused: 127.0.0.1 is a loopback address",
		"c_v09":      "line 2: createSurface is an A2UI v0.9 message; the canvas renders A2UI v0.8 only",
		"c_noscript": "eval needs javaScript",
		"c_extra":    "url is not a parameter of hide",
		"c_enum":     "action",
		"c_evalnav":  "a page of another site, which the canvas cannot script",
	} {
		res, ok := toolResult(llm, id)
		g.Expect(ok).To(BeTrue(), id)
		g.Expect(res.Content).To(HavePrefix("error"), id)
		g.Expect(res.Content).To(ContainSubstring(want), id)
	}
	res, _ = toolResult(llm, "c_nav")
	g.Expect(res.Content).NotTo(HavePrefix("error"))
	g.Expect(u.eval(`() => document.getElementById('canvas-frame').getAttribute('src')`).Str()).To(Equal("https://1.1.1.1/"))
	g.Expect(u.eval(`() => document.getElementById('canvas-frame').getAttribute('sandbox')`).Str()).To(Equal("allow-scripts"))
	g.Expect(u.eval(`() => document.querySelectorAll('#canvas-surfaces .a2ui-surface').length`).Int()).To(Equal(1), "the v0.9 push changed nothing")

	// The canvas lives in the conversation: a reload restores it.
	u.reload()
	u.wait("the canvas after the reload", `() => !document.getElementById('canvas-panel').hidden && document.getElementById('canvas-panel').dataset.url === 'https://1.1.1.1/'`)
	u.wait("the surface after the reload", `(sel) => !!document.querySelector(sel + ' button.a2ui-Button')`, surface)

	// navigate without url returns to the canvas document; hide hides.
	llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_back", `{"action":"navigate"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_eval2", `{"action":"eval","javaScript":"document.title"}`)}},
		fakellm.Turn{ToolCalls: []fakellm.Call{call("c_hide", `{"action":"hide"}`)}},
		fakellm.Turn{Text: "Hidden."},
	)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.send("hide it")
	u.waitLastTurn("done")
	res, _ = toolResult(llm, "c_eval2")
	g.Expect(res.Content).NotTo(HavePrefix("error"))
	g.Expect(res.Content).To(HaveSuffix("\nPicoBot canvas"))
	g.Expect(u.eval(`() => document.getElementById('canvas-panel').hidden`).Bool()).To(BeTrue())
	u.shot("canvas-hidden")
	g.Expect(u.problems()).To(BeEmpty())
}

// heldReplies holds the fake model's answer to some user messages until the
// test releases it: the reply is still running while the user clicks.
type heldReplies struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
}

// hold makes the answer to the user message text wait for release(text).
func (h *heldReplies) hold(text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gates == nil {
		h.gates = map[string]chan struct{}{}
	}
	h.gates[text] = make(chan struct{})
}

func (h *heldReplies) gate(text string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gates[text]
}

// release lets the answer to text go; releasing twice is harmless.
func (h *heldReplies) release(text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.gates[text]; ok {
		close(c)
		delete(h.gates, text)
	}
}

// releaseAll lets every held answer go (the test's cleanup: the fake model
// cannot close while a request waits).
func (h *heldReplies) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, c := range h.gates {
		close(c)
		delete(h.gates, k)
	}
}

// lastUser is the text of the last message of a request when the user
// sent it, else "".
func lastUser(r fakellm.Recorded) string {
	if len(r.Messages) == 0 || r.Messages[len(r.Messages)-1].Role != "user" {
		return ""
	}
	return r.Messages[len(r.Messages)-1].Content
}

// actionNames lists, in request order, the context "name" of every request
// that ended with a canvas action: each action the model was asked about.
func actionNames(t testing.TB, llm *fakellm.Server) []string {
	t.Helper()
	var out []string
	for _, r := range llm.Requests() {
		text, ok := strings.CutPrefix(lastUser(r), "[canvas action] ")
		if !ok {
			continue
		}
		var a struct {
			UserAction struct{ Context map[string]any }
		}
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			t.Fatalf("failed to decode the canvas action %q: %v", text, err)
		}
		name, _ := a.UserAction.Context["name"].(string)
		out = append(out, name)
	}
	return out
}

// TestWebUICanvasActionQueue clicks an A2UI button while a reply is still
// running, in headless Chromium against `picobot serve`: the page queues
// the click (it tells so) instead of dropping it, and sends it once the
// reply ends, however it ends: two clicks reach the model once each, in
// click order, after the held reply was answered; a click during a reply
// the user stops is sent after the stop; a click queued when the gateway
// goes away is sent once the page has reconnected to it again; a click
// queued when another tab of the chat starts a new conversation is dropped
// with a notice.
func TestWebUICanvasActionQueue(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	held := &heldReplies{}
	t.Cleanup(held.releaseAll) // before llm.Close
	dir := t.TempDir()
	canvasAgent(t, dir, llm.URL())
	env := "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"
	srv := serve(t, dir, env)
	browser := launchBrowser(t)
	u := openUI(t, browser, srv.url+"/", shotsDir(t))
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)

	push, _ := json.Marshal(map[string]string{"action": "a2ui_push", "jsonl": formJSONL})
	llm.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c_present", Name: "canvas", Args: `{"action":"present"}`}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c_push", Name: "canvas", Args: string(push)}}},
		fakellm.Turn{Text: "The form is on the canvas."},
	)
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		text := lastUser(r)
		if c := held.gate(text); c != nil {
			<-c
			return fakellm.Turn{Text: "Answered " + text + "."}
		}
		if strings.HasPrefix(text, "[canvas action] ") {
			return fakellm.Turn{Text: "Got the action."}
		}
		return fakellm.Turn{Text: "OK."}
	})
	u.send("show me a form")
	u.waitLastTurn("done")
	surface := `#canvas-surfaces section.a2ui-surface[data-surface-id="signup"]`
	button := surface + ` button.a2ui-Button[data-id="go"]`
	u.el(button)

	// heldTurn sends text, whose answer is held, and waits until the model
	// has it: the reply is running.
	heldTurn := func(text string) {
		t.Helper()
		held.hold(text)
		u.send(text)
		g.Eventually(func() bool {
			for _, r := range llm.Requests() {
				if lastUser(r) == text {
					return true
				}
			}
			return false
		}, waitTimeout, 50*time.Millisecond).Should(BeTrue(), "the model to be asked %q", text)
		g.Expect(u.eval(`() => document.getElementById('app').dataset.busy`).Str()).To(Equal("true"))
	}
	clickWith := func(name string) {
		t.Helper()
		u.el(surface + ` .a2ui-TextField input`).MustSelectAllText().MustInput(name)
		u.click(button)
	}
	sends := func() int {
		n := 0
		for _, f := range u.sentFrames() {
			if f == "send" {
				n++
			}
		}
		return n
	}
	queued := func() int {
		return u.eval(`() => Number(document.getElementById('canvas-queue').dataset.count || 0)`).Int()
	}

	// Two clicks during a held reply are queued, in order, and not sent.
	heldTurn("think slowly")
	sent := sends()
	clickWith("Ada")
	g.Expect(queued()).To(Equal(1))
	g.Expect(u.text("#canvas-queue")).To(Equal("1 canvas action is queued: sent when the reply ends, one after another."))
	g.Expect(u.text("#composer-hint")).To(Equal("Action queued (1 waiting): it is sent when the reply ends."))
	clickWith("Eve")
	g.Expect(queued()).To(Equal(2))
	g.Expect(u.text("#canvas-queue")).To(HavePrefix("2 canvas actions are queued"))
	g.Expect(sends()).To(Equal(sent), "nothing is sent while the reply runs")
	g.Expect(actionNames(t, llm)).To(BeEmpty())
	u.shot("canvas-actions-queued")

	// The reply ends: the actions follow, one turn each.
	turns := u.eval(`() => document.querySelectorAll('#messages .turn').length`).Int()
	held.release("think slowly")
	u.wait("the two actions answered", `(n) => document.querySelectorAll('#messages .turn').length === n + 2 &&
	  [...document.querySelectorAll('#messages .turn')].every((t) => t.dataset.status === 'done') &&
	  document.getElementById('app').dataset.busy !== 'true'`, turns)
	g.Expect(u.eval(`() => document.getElementById('canvas-queue').hidden`).Bool()).To(BeTrue())
	g.Expect(sends()).To(Equal(sent + 2))
	g.Expect(actionNames(t, llm)).To(Equal([]string{"Ada", "Eve"}), "each action once, in click order")
	reqs := llm.Requests()
	var history []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "user" || m.Role == "assistant" {
			history = append(history, m.Role+": "+m.Content)
		}
	}
	g.Expect(history).To(ContainElement("assistant: Answered think slowly."))
	var order []string
	for _, h := range history {
		switch {
		case h == "user: think slowly", h == "assistant: Answered think slowly.":
			order = append(order, h)
		case strings.HasPrefix(h, "user: [canvas action] "):
			order = append(order, "action")
		}
	}
	g.Expect(order).To(Equal([]string{"user: think slowly", "assistant: Answered think slowly.", "action", "action"}),
		"the actions reach the model after the held reply, once each")

	// A reply the user stops: the queued action is sent after it.
	heldTurn("think again")
	clickWith("Zed")
	g.Expect(queued()).To(Equal(1))
	u.click("#stop")
	u.wait("the action answered after the stop", `() => {
	  const t = [...document.querySelectorAll('#messages .turn')];
	  return t.length >= 2 && t[t.length - 2].dataset.status === 'stopped' && t[t.length - 1].dataset.status === 'done' &&
	    document.getElementById('app').dataset.busy !== 'true';
	}`)
	g.Expect(actionNames(t, llm)).To(Equal([]string{"Ada", "Eve", "Zed"}))
	held.release("think again")

	// The gateway goes away during a reply: the queued action waits for the
	// page to reconnect, then is sent once.
	heldTurn("think once more")
	clickWith("Max")
	srv.stop()
	held.release("think once more")
	u.wait("the page to see the gateway gone", `() => document.getElementById('conn-status').dataset.state !== 'open'`)
	g.Expect(queued()).To(Equal(1), "the action survives the dropped connection")
	g.Expect(u.text("#canvas-queue")).To(Equal("1 canvas action is queued: sent once the connection is back."))
	serveAt(t, dir, strings.TrimPrefix(srv.url, "http://"), env)
	u.wait("the action sent after the reconnect", `() => document.getElementById('conn-status').dataset.state === 'open' &&
	  document.getElementById('canvas-queue').hidden && document.getElementById('app').dataset.busy !== 'true' &&
	  document.querySelector('#messages .turn:last-child').dataset.status === 'done'`)
	g.Expect(actionNames(t, llm)).To(Equal([]string{"Ada", "Eve", "Zed", "Max"}))

	// Another tab of the chat starts a new conversation while an action
	// waits: the action is dropped, with a notice, not sent to the new one.
	heldTurn("think at last")
	clickWith("Kim")
	g.Expect(queued()).To(Equal(1))
	other := openUI(t, browser, srv.url+"/", shotsDir(t))
	other.wait("the other tab to connect", `() => document.getElementById('conn-status').dataset.state === 'open' &&
	  !document.getElementById('new-dialog').disabled`)
	other.click("#new-dialog")
	other.wait("the new conversation", `() => /Started a new conversation/.test(document.getElementById('sessions-status').textContent)`)
	u.page.MustActivate() // a background tab runs no animation frames, which the waits poll on
	held.release("think at last")
	u.wait("the notice of the dropped action", `() => !!document.querySelector('#messages .msg.system.actions-dropped')`)
	g.Expect(u.text("#messages .msg.system.actions-dropped")).To(Equal(
		"1 queued canvas action was not sent: the conversation it was clicked in is no longer the current one."))
	g.Expect(queued()).To(Equal(0))
	g.Expect(u.eval(`() => document.getElementById('canvas-queue').hidden`).Bool()).To(BeTrue())
	u.shot("canvas-action-dropped")
	g.Expect(actionNames(t, llm)).To(Equal([]string{"Ada", "Eve", "Zed", "Max"}), "the dropped action never reaches the model")
	g.Expect(u.problems()).To(BeEmpty())
	g.Expect(other.problems()).To(BeEmpty())
}
