package webui

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/input"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

// Texts the fake model streams.
const (
	helloReply = "Hello! I am **PicoBot**.\n\nI can:\n\n- answer questions\n- run tools such as `calculator`\n- keep several conversations apart"
	storyReply = "Once upon a time a very patient robot counted every grain of sand on a long beach, one by one, " +
		"writing each number into a notebook that grew heavier with every page, until the tide came in and " +
		"the robot had to start all over again from the very first grain near the dunes."
)

// agents writes two Agent manifests: "assistant" (its key comes from the
// environment) and "offline", whose key exists nowhere, so it has no model.
func writeAgents(t testing.TB, dir, modelURL string) {
	t.Helper()
	for _, a := range []struct{ name, secret string }{{"assistant", "model-api-key"}, {"offline", "missing-key"}} {
		yaml := fmt.Sprintf(`apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: %s
spec:
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: %s, key: apiKey}
`, a.name, modelURL, a.secret)
		if err := os.WriteFile(filepath.Join(dir, a.name+".yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatalf("failed to write agent manifest: %v", err)
		}
	}
}

// seedArtifacts stores a PNG chart and a CSV file in the state folder
// `picobot serve` will use, through the same artifact store it uses, and
// returns their ids. (No tool of embedded mode stores images yet; the model
// links these the way a reply links any artifact.)
func seedArtifacts(t testing.TB, dir string) (chartID, csvID string) {
	t.Helper()
	ctx := store.WithTenant(context.Background(), manifest.DefaultNamespace)
	state := filepath.Join(dir, ".picobot")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatalf("failed to create state folder: %v", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(state, sqlite.FileName))
	if err != nil {
		t.Fatalf("failed to open the state database: %v", err)
	}
	defer func() { _ = st.Close() }()
	blobs, err := localblob.Open(filepath.Join(state, "artifacts"), localblob.Options{})
	if err != nil {
		t.Fatalf("failed to open the artifact folder: %v", err)
	}
	arts := artifact.Store{Blobs: blobs, State: st}
	chart, err := arts.Save(ctx, "", "chart.png", "image/png", chartPNG(t))
	if err != nil {
		t.Fatalf("failed to store chart.png: %v", err)
	}
	csv, err := arts.Save(ctx, "", "data.csv", "text/csv", []byte("day,steps\nmon,4200\ntue,6100\n"))
	if err != nil {
		t.Fatalf("failed to store data.csv: %v", err)
	}
	return chart.ID, csv.ID
}

// chartPNG draws a small bar chart.
func chartPNG(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 320, 160))
	for y := range 160 {
		for x := range 320 {
			img.Set(x, y, color.RGBA{245, 247, 250, 255})
		}
	}
	for i, h := range []int{60, 100, 80, 130, 45, 110, 90} {
		for y := 150 - h; y < 150; y++ {
			for x := 20 + i*42; x < 50+i*42; x++ {
				img.Set(x, y, color.RGBA{47, 95, 208, 255})
			}
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatalf("failed to encode chart: %v", err)
	}
	return b.Bytes()
}

// codeReply is an answer with a code block.
const codeReply = "Like this:\n\n```go\nfunc main() {\n\treturn 42\n}\n```\n"

// respond scripts the fake model by the last message it is sent.
func respond(chartID, csvID string) func(fakellm.Recorded) fakellm.Turn {
	return func(r fakellm.Recorded) fakellm.Turn {
		if len(r.Messages) == 0 {
			return fakellm.Turn{Text: "no messages?"}
		}
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			content := ""
			if len(last.ToolResults) > 0 {
				content = last.ToolResults[0].Content
			}
			if strings.Contains(content, "42") {
				return fakellm.Turn{Text: "6 × 7 = **42**."}
			}
			return fakellm.Turn{Text: "Saved `notes.md` in your workspace."}
		}
		text := strings.TrimSpace(last.Content)
		switch {
		case text == "hello":
			return fakellm.Turn{Text: helloReply, ChunkDelay: 80 * time.Millisecond}
		case strings.HasPrefix(text, "what is 6*7"):
			return fakellm.Turn{Text: "Let me calculate that.", ToolCalls: []fakellm.Call{
				{ID: "call_calc", Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}}
		case strings.HasPrefix(text, "save a note"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{
				{ID: "call_write", Name: "file_write", Args: `{"path":"notes.md","content":"# Notes\n\n- buy milk\n"}`}}}
		case strings.HasPrefix(text, "show me the chart"):
			return fakellm.Turn{Text: fmt.Sprintf("Here is this week's chart:\n\n![Steps per day](/api/v1/artifacts/%s)\n\n"+
				"The numbers are in [data.csv](/api/v1/artifacts/%s).", chartID, csvID)}
		case strings.HasPrefix(text, "show me some code"):
			return fakellm.Turn{Text: codeReply}
		case text == "roll a die":
			// Each time it is asked, a new answer: what regenerate shows.
			n := 0
			for _, m := range r.Messages {
				if m.Role == "user" && strings.TrimSpace(m.Content) == text {
					n++
				}
			}
			return fakellm.Turn{Text: fmt.Sprintf("You rolled a %d.", n)}
		case strings.HasPrefix(text, "tell me a long story"):
			return fakellm.Turn{Text: storyReply, ChunkDelay: 400 * time.Millisecond}
		}
		return fakellm.Turn{Text: "You said: " + text}
	}
}

// env is what a browser test runs against: headless Chromium, the fake
// model, and `picobot serve` on a folder with two agents and two stored
// artifacts.
type env struct {
	browser        *rod.Browser
	llm            *fakellm.Server
	serve          *serveProc
	dir, shots     string
	chartID, csvID string
}

// start sets up an env; extra are environment variables of picobot serve.
func start(t testing.TB, extra ...string) *env {
	t.Helper()
	e := &env{shots: os.Getenv("PICOBOT_SCREENSHOTS")}
	if e.shots == "" {
		e.shots = t.TempDir()
	} else if err := os.MkdirAll(e.shots, 0o755); err != nil {
		t.Fatalf("failed to create screenshot folder: %v", err)
	}
	t.Logf("screenshots go to %s", e.shots)
	e.browser = launchBrowser(t)
	e.llm = fakellm.New()
	t.Cleanup(e.llm.Close)
	e.dir = t.TempDir()
	writeAgents(t, e.dir, e.llm.URL())
	e.chartID, e.csvID = seedArtifacts(t, e.dir)
	e.llm.Respond(respond(e.chartID, e.csvID))
	e.serve = serve(t, e.dir, append([]string{"PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"}, extra...)...)
	return e
}

// TestWebUI clicks through the web UI of `picobot serve` in headless
// Chromium: a streamed reply, a tool call shown collapsed before the answer
// and expanded, an exported transcript (/dump) and an image artifact, the
// no_model error and the health page, dialogs created, renamed, switched,
// archived and deleted (buttons and typed slash commands), a slow turn
// stopped, a reload, and the layout at 375 px. It takes screenshots of each
// step and checks that the page never hit a script error or a CSP violation.
func TestWebUI(t *testing.T) {
	g := NewWithT(t)
	e := start(t)
	llm, csvID := e.llm, e.csvID
	u := openUI(t, e.browser, e.serve.url+"/", e.shots)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the ready agent to be chosen", `() => document.getElementById('agent-select').value === 'assistant'`)
	u.el(".empty-state")
	// Starter prompts show off the agent's tools; a click puts one in the
	// input, to send or to change.
	u.wait("the starter prompts", `() => [...document.querySelectorAll('.empty-state .starter')].map((b) => b.textContent).join('|') ===
	  'What is 1234 * 5678?|Run `+"`uname -a`"+`|Remember that I prefer short answers|What can you do?'`)
	u.shot("empty")
	u.click(".empty-state .starter")
	g.Expect(u.eval(`() => document.getElementById('input').value`).Str()).To(Equal("What is 1234 * 5678?"))
	u.eval(`() => { const i = document.getElementById('input'); i.value = ''; i.dispatchEvent(new Event('input')); }`)

	t.Run("streamed reply", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.send("hello")
		// The answer is seen while it streams: partial text, the Stop button on.
		u.wait("partial streamed text", `(full) => {
		  const a = document.querySelector('#messages .turn:last-child .msg.assistant.streaming .content');
		  return a && a.textContent.length > 0 && a.textContent.length < full.length && !document.getElementById('stop').disabled;
		}`, helloReply)
		u.shot("streaming")
		u.waitLastTurn("done")
		g.Expect(u.text("#messages .turn:last-child .msg.user")).To(Equal("hello"))
		g.Expect(u.eval(`() => document.querySelector('#messages .turn:last-child .content').innerHTML`).Str()).To(And(
			ContainSubstring("<strong>PicoBot</strong>"), ContainSubstring("<li>run tools such as <code>calculator</code></li>")))
		g.Expect(u.eval(`() => document.getElementById('stop').disabled`).Bool()).To(BeTrue(), "Stop is off once the turn ended")
		u.shot("streamed")
	})

	t.Run("tool call before the answer, collapsed, expandable", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.send("what is 6*7?")
		u.waitLastTurn("done")
		turn := "#messages .turn:last-child "
		g.Expect(u.text(turn + ".tool-call .tool-name")).To(Equal("calculator"))
		g.Expect(u.text(turn + ".tool-call .tool-status")).To(Equal("done"))
		g.Expect(u.text(turn + ".interim")).To(Equal("Let me calculate that."))
		g.Expect(u.text(turn + ".content")).To(Equal("6 × 7 = 42."))
		g.Expect(u.eval(`(sel) => {
		  const t = document.querySelector(sel);
		  const order = (a, b) => !!(t.querySelector(a).compareDocumentPosition(t.querySelector(b)) & Node.DOCUMENT_POSITION_FOLLOWING);
		  return order('.interim', '.tool-call') && order('.tool-call', '.content');
		}`, strings.TrimSpace(turn)).Bool()).To(BeTrue(), "interim text, then the tool call, then the answer")
		g.Expect(u.eval(`() => document.querySelector('#messages .turn:last-child .tool-call').open`).Bool()).To(BeFalse(), "collapsed by default")
		g.Expect(u.eval(`(sel) => document.querySelector(sel).checkVisibility()`, turn+".tool-result").Bool()).To(BeFalse(), "the result is hidden")
		u.shot("tool-collapsed")
		// Expand it with the keyboard.
		u.el(turn + ".tool-call > summary").MustFocus()
		u.page.Keyboard.MustType(input.Enter)
		u.wait("the tool call to open", `() => document.querySelector('#messages .turn:last-child .tool-call').open`)
		g.Expect(u.text(turn + ".tool-result")).To(Equal("42"))
		g.Expect(u.text(turn + ".tool-args-full")).To(ContainSubstring(`"expression": "6*7"`))
		u.shot("tool-expanded")
		// The model got the tool's result back.
		var sent bool
		for _, r := range llm.Requests() {
			for _, m := range r.Messages {
				for _, tr := range m.ToolResults {
					sent = sent || tr.CallID == "call_calc" && tr.Content == "42"
				}
			}
		}
		g.Expect(sent).To(BeTrue(), "calculator's result went back to the model")
	})

	t.Run("file tool and exported transcript link", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.send("save a note")
		u.waitLastTurn("done")
		g.Expect(u.text("#messages .turn:last-child .tool-call .tool-name")).To(Equal("file_write"))
		g.Expect(u.text("#messages .turn:last-child .content")).To(Equal("Saved notes.md in your workspace."))
		// Export (/dump) from the sidebar: its reply links the markdown file.
		u.click("#dump-dialog")
		u.wait("the /dump reply", `() => !!document.querySelector('#messages .turn:last-child .msg.system a.artifact-file')`)
		link := u.el("#messages .turn:last-child .msg.system a.artifact-file")
		g.Expect(link.MustText()).To(HaveSuffix(".md"))
		href := *link.MustAttribute("href")
		g.Expect(href).To(HavePrefix("/api/v1/artifacts/"))
		body := u.eval(`async (href) => { const r = await fetch(href); return r.status + ' ' + await r.text(); }`, href).Str()
		g.Expect(body).To(HavePrefix("200 "))
		g.Expect(body).To(And(ContainSubstring("file_write"), ContainSubstring("what is 6*7?")))
		u.shot("dump-link")
	})

	t.Run("image and file artifacts in a reply", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.send("show me the chart")
		u.waitLastTurn("done")
		u.wait("the chart to load", `() => {
		  const img = document.querySelector('#messages .turn:last-child .content img.artifact-img');
		  return img && img.complete && img.naturalWidth === 320;
		}`)
		g.Expect(u.eval(`() => document.querySelector('#messages .turn:last-child img.artifact-img').alt`).Str()).To(Equal("Steps per day"))
		file := u.el("#messages .turn:last-child .content a.artifact-file")
		g.Expect(file.MustText()).To(Equal("data.csv"))
		g.Expect(*file.MustAttribute("href")).To(Equal("/api/v1/artifacts/" + csvID))
		u.shot("image-artifact")
	})

	t.Run("code blocks are coloured and copied", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.allowClipboard()
		u.send("show me some code")
		u.waitLastTurn("done")
		const block = "#messages .turn:last-child .content pre"
		u.wait("the code to be coloured", `(sel) => document.querySelector(sel + ' code.hljs span.hljs-keyword') !== null`, block)
		g.Expect(u.eval(`(sel) => [...document.querySelectorAll(sel + ' span.hljs-keyword')].map((e) => e.textContent).join(',')`, block).Str()).
			To(Equal("func,return"))
		g.Expect(u.text(block+" code")).To(Equal("func main() {\n\treturn 42\n}"), "the text is unchanged")
		u.click(block + " button.code-copy")
		u.wait("the button to say so", `(sel) => document.querySelector(sel + ' button.code-copy').textContent === 'Copied'`, block)
		g.Expect(u.eval(`() => navigator.clipboard.readText()`).Str()).To(Equal("func main() {\n\treturn 42\n}"))
		u.shot("code-block")
	})

	t.Run("copy, edit and regenerate a turn", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.allowClipboard()
		u.send("roll a die")
		u.waitLastTurn("done")
		const turn = "#messages .turn:last-child"
		g.Expect(u.text(turn + " .content")).To(Equal("You rolled a 1."))
		u.click(turn + " .turn-actions .turn-copy")
		u.wait("the copy to say so", `(sel) => document.querySelector(sel + ' .turn-copy').textContent === 'Copied'`, turn)
		g.Expect(u.eval(`() => navigator.clipboard.readText()`).Str()).To(Equal("You rolled a 1."))
		u.click(turn + " .turn-actions .turn-edit")
		g.Expect(u.eval(`() => document.getElementById('input').value`).Str()).To(Equal("roll a die"))
		u.eval(`() => { const i = document.getElementById('input'); i.value = ''; i.dispatchEvent(new Event('input')); }`)
		turns := u.eval(`() => document.querySelectorAll('#messages .turn').length`).Int()
		u.click(turn + " .turn-actions .turn-regenerate")
		u.wait("a new turn", `(n) => document.querySelectorAll('#messages .turn').length === n + 1`, turns)
		u.waitLastTurn("done")
		g.Expect(u.text(turn + " .msg.user")).To(Equal("roll a die"))
		g.Expect(u.text(turn+" .content")).To(Equal("You rolled a 2."), "a new answer")
		// Commands get no actions.
		g.Expect(u.eval(`() => [...document.querySelectorAll('#messages .turn')].filter((t) => t.querySelector('.msg.user') &&
		  t.querySelector('.msg.user').textContent.startsWith('/') && t.querySelector('.turn-actions')).length`).Int()).To(BeZero())
		u.shot("turn-actions")
	})

	t.Run("no_model error and the health page", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.el("#agent-select").MustSelect("offline (not ready)")
		u.wait("the not-ready banner", `() => {
		  const b = document.getElementById('banner');
		  return !b.hidden && b.textContent.includes('not ready');
		}`)
		u.send("hi")
		u.waitLastTurn("error")
		e := "#messages .turn:last-child .msg.error[data-code=no_model] "
		g.Expect(u.text(e + ".error-title")).To(HavePrefix("The agent has no model"))
		g.Expect(u.text(e + ".error-message")).To(ContainSubstring("missing-key"))
		u.shot("no-model-error")
		u.click(e + ".error-action")
		u.wait("the health checks", `() => !document.getElementById('config-view').hidden && document.querySelectorAll('#health .check').length > 0`)
		g.Expect(u.eval(`() => location.hash`).Str()).To(Equal("#health"))
		// The same report as the health tool, /health and `picobot health`:
		// a section per kind, each check marked with its kind.
		g.Expect(u.eval(`() => [...document.querySelectorAll('#health .health-kind')].map((s) => s.dataset.kind + ':' + s.querySelector('h4').textContent).join('|')`).Str()).
			To(Equal("core:Required|feature:Required by enabled features|optional:Optional"))
		offline := `#health .health-kind[data-kind=core] .check.fail[data-name="model: agent offline"] `
		g.Expect(u.text(offline+".check-message")).To(HavePrefix("no model configured: "), "no model is told apart from an unreachable one")
		g.Expect(u.text(offline + ".check-fix")).To(ContainSubstring("PICOBOT_SECRET_"))
		g.Expect(u.text(offline + ".check-kind")).To(Equal("required"))
		assistant := `#health .check.ok[data-name="model: agent assistant"] `
		g.Expect(u.text(assistant + ".check-state")).To(Equal("OK"))
		g.Expect(u.text(assistant+".check-message")).To(Equal("openai/fake at "+llm.URL()+" answers"), "the endpoint was probed")
		// The browser check, which the page lacked: the executable and a
		// real headless launch, required by the enabled browser.
		browser := `#health .health-kind[data-kind=feature] .check[data-name="agent assistant: browser headless launch"] `
		g.Expect(u.text(browser + ".check-kind")).To(Equal("feature"))
		g.Expect(u.text(browser + ".check-state")).To(Equal("OK"))
		g.Expect(u.text(browser + ".check-message")).To(ContainSubstring("started headless"))
		g.Expect(u.text(`#health .check[data-name="agent assistant: browser executable"] .check-state`)).To(Equal("OK"))
		g.Expect(u.text("#health-summary")).To(ContainSubstring("failing"))
		g.Expect(u.unnamedControls(8)).To(BeEmpty(), "every control has an accessible name")
		u.shot("health")
		// Back to the chat (keyboard on the tabs), with the ready agent.
		u.el("#health-tab").MustFocus()
		u.page.Keyboard.MustType(input.ArrowLeft)
		u.wait("the chat view", `() => !document.getElementById('chat-view').hidden`)
		u.el("#agent-select").MustSelect("assistant")
		u.wait("the first conversation's history", `() => document.querySelectorAll('#messages .turn .tool-call').length >= 2`)
		g.Expect(u.text("#messages .turn .tool-call .tool-name")).To(Equal("calculator"), "tool calls come back from history")
	})

	t.Run("dialogs: create, rename, switch, slash commands, archive, delete", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		rows := `() => [...document.querySelectorAll('#sessions li.session-row')].map((li) => (li.classList.contains('current') ? '*' : '') + li.querySelector('.session-title').textContent).join('|')`
		g.Expect(u.eval(rows).Str()).To(Equal("*hello"), "the first dialog, auto-titled")

		u.click("#new-dialog")
		u.wait("a new current dialog", `() => {
		  const cur = document.querySelector('#sessions li.session-row.current');
		  return cur && cur.dataset.dialogId !== 'default' && document.querySelectorAll('#sessions li.session-row').length === 2;
		}`)
		u.el("#messages .empty-state")
		g.Expect(u.text("#sessions-status")).To(Equal("Started a new conversation."))
		u.send("second dialog message")
		u.waitLastTurn("done")
		g.Expect(u.text("#messages .turn:last-child .content")).To(Equal("You said: second dialog message"))

		// Rename the current dialog inline.
		u.click("#sessions li.session-row.current .session-rename")
		u.wait("the title field to have focus", `() => document.activeElement && document.activeElement.classList.contains('rename-input')`)
		u.shot("rename")
		u.el("#sessions .rename-input").MustSelectAllText().MustInput("Trip planning")
		u.page.Keyboard.MustType(input.Enter)
		u.wait("the new title", `() => {
		  const cur = document.querySelector('#sessions li.session-row.current .session-title');
		  return cur && cur.textContent === 'Trip planning';
		}`)
		second := u.eval(`() => document.querySelector('#sessions li.session-row.current').dataset.dialogId`).Str()
		u.wait("focus back on the Rename button", `() => document.activeElement.classList.contains('session-rename')`)
		// Escape cancels a rename and keeps the title.
		u.page.Keyboard.MustType(input.Enter)
		u.wait("the title field", `() => document.activeElement.classList.contains('rename-input')`)
		u.page.MustInsertText("never saved")
		u.page.Keyboard.MustType(input.Escape)
		u.wait("the rename to be cancelled", `() => !document.querySelector('#sessions .rename-form') && document.activeElement.classList.contains('session-rename')`)
		g.Expect(u.text("#sessions li.session-row.current .session-title")).To(Equal("Trip planning"))

		// Switch back to the first dialog: its history shows again.
		u.click(`#sessions li.session-row[data-dialog-id="default"] button.session`)
		u.wait("the first dialog to be current", `() => document.querySelector('#sessions li.session-row.current').dataset.dialogId === 'default'`)
		u.wait("its history", `() => document.getElementById('messages').textContent.includes('what is 6*7?')`)
		g.Expect(u.eval(`() => document.getElementById('messages').textContent.includes('second dialog message')`).Bool()).To(BeFalse())
		u.shot("switched")

		// Slash commands typed in the input work too.
		u.send("/new")
		u.waitLastTurn("done")
		g.Expect(u.text("#messages .turn:last-child .msg.system")).To(ContainSubstring("new"))
		u.wait("the typed /new to show in the list", `() => document.querySelectorAll('#sessions li.session-row').length === 3`)
		third := u.eval(`() => document.querySelector('#sessions li.session-row.current').dataset.dialogId`).Str()
		g.Expect(third).NotTo(BeElementOf("default", second))
		u.send("/rename Scratch pad")
		u.waitLastTurn("done")
		u.wait("the typed /rename to show in the list", `() => document.querySelector('#sessions li.session-row.current .session-title').textContent === 'Scratch pad'`)

		// Archive "Trip planning" (not current): it leaves the list.
		trip := fmt.Sprintf(`#sessions li.session-row[data-dialog-id=%q]`, second)
		u.el(trip).MustHover()
		u.click(trip + " .session-archive")
		u.wait("the archived dialog to leave the list", `(sel) => !document.querySelector(sel)`, trip)
		g.Expect(u.text("#sessions-status")).To(ContainSubstring("Archived “Trip planning”"))

		// Delete the current one after confirming in the modal dialog.
		u.click("#sessions li.session-row.current .session-delete")
		u.wait("the confirmation", `() => document.getElementById('confirm-dialog').open`)
		g.Expect(u.text("#confirm-text")).To(ContainSubstring("Scratch pad"))
		u.shot("confirm-delete")
		u.click("#confirm-ok")
		u.wait("the deleted dialog to leave the list", `(id) => !document.querySelector('#sessions li.session-row[data-dialog-id="' + id + '"]')`, third)
		u.wait("focus on the conversation that is current now", `() => document.activeElement.matches('#sessions li.session-row.current button.session')`)
		// No current dialog now: the next message goes to the most recent one.
		g.Expect(u.eval(rows).Str()).To(Equal("*hello"))
		g.Expect(u.text("#sessions li.session-row.current .session-badge")).To(Equal("Your next message goes here"))
		u.wait("the remaining dialog's history", `() => document.getElementById('messages').textContent.includes('what is 6*7?')`)
		u.shot("after-delete")
		g.Expect(u.unnamedControls(15)).To(BeEmpty(), "every control has an accessible name")
		// The buttons went through the control channel (typed commands are messages).
		g.Expect(u.sentFrames()).To(ContainElements("dialog list", "dialog create", "dialog rename", "dialog switch", "dialog archive", "dialog delete", "send"))
	})

	t.Run("stop a slow turn", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.send("tell me a long story")
		u.wait("the story to start streaming", `() => {
		  const a = document.querySelector('#messages .turn:last-child .msg.assistant.streaming .content');
		  return a && a.textContent.length > 10;
		}`)
		u.click("#stop")
		u.waitLastTurn("stopped")
		g.Expect(u.sentFrames()).To(ContainElement("stop"))
		g.Expect(u.text("#messages .turn:last-child .msg.error.stopped .error-title")).To(HavePrefix("Stopped"))
		partial := u.text("#messages .turn:last-child .content")
		g.Expect(storyReply).To(HavePrefix(strings.TrimSpace(partial)), "the text streamed so far is kept")
		g.Expect(len(partial)).To(BeNumerically("<", len(storyReply)))
		g.Expect(u.eval(`() => document.getElementById('send').disabled`).Bool()).To(BeFalse(), "sending works again")
		u.shot("stopped")
		u.send("are you there?")
		u.waitLastTurn("done")
		g.Expect(u.text("#messages .turn:last-child .content")).To(Equal("You said: are you there?"))
	})

	t.Run("reload keeps the chat", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.reload()
		u.wait("the WebSocket to reconnect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
		u.wait("the history", `() => document.getElementById('messages').textContent.includes('are you there?')`)
		g.Expect(u.eval(`() => document.querySelectorAll('#sessions li.session-row').length`).Int()).To(Equal(1))
		// The stopped turn comes back as it was shown: its partial text and
		// "Stopped", not the stored marker.
		g.Expect(u.text("#messages")).NotTo(ContainSubstring("[stopped]"))
		g.Expect(u.eval(`() => [...document.querySelectorAll('#messages .msg.error.stopped .error-title')].map((e) => e.textContent)`).String()).
			To(ContainSubstring("Stopped"))
		// The list shows titles and times, not the internal dialog ids.
		g.Expect(u.text("#sessions .session-meta")).NotTo(MatchRegexp(`\bd_[a-z0-9]+\b|default`))
	})

	t.Run("375 px wide", func(t *testing.T) {
		u.t = t
		g := NewWithT(t)
		u.page.MustSetViewport(375, 780, 1, true)
		u.wait("the narrow layout", `() => getComputedStyle(document.getElementById('sidebar-toggle')).display !== 'none'`)
		g.Expect(u.eval(`() => [...document.querySelectorAll('#sidebar *')].filter((e) => e.checkVisibility({ visibilityProperty: true })).length`).Int()).
			To(BeZero(), "the closed drawer shows nothing")
		noOverflow := `() => document.documentElement.scrollWidth <= 375 && document.getElementById('messages').scrollWidth <= document.getElementById('messages').clientWidth + 1`
		g.Expect(u.eval(noOverflow).Bool()).To(BeTrue(), "nothing scrolls sideways")
		u.shot("mobile-chat")
		u.click("#sidebar-toggle")
		u.wait("the drawer to slide in", `() => {
		  const s = document.getElementById('sidebar');
		  return document.getElementById('app').dataset.sidebar === 'open' && getComputedStyle(s).visibility === 'visible' && s.getBoundingClientRect().left === 0;
		}`)
		g.Expect(u.eval(`() => document.activeElement.closest('#sidebar') !== null`).Bool()).To(BeTrue(), "focus moves into the drawer")
		g.Expect(u.eval(`() => document.getElementById('sidebar-toggle').getAttribute('aria-expanded')`).Str()).To(Equal("true"))
		u.shot("mobile-sidebar")
		u.page.Keyboard.MustType(input.Escape)
		u.wait("the drawer to close", `() => document.getElementById('app').dataset.sidebar !== 'open'`)
		u.click("#health-tab")
		u.wait("the health checks", `() => document.querySelectorAll('#health .check').length > 0`)
		g.Expect(u.eval(noOverflow).Bool()).To(BeTrue())
		u.shot("mobile-health")
	})

	u.t = t
	g.Expect(u.problems()).To(BeEmpty(), "no script errors or CSP violations")
}

// TestWebUIAPIKey checks the UI of a gateway that needs an API key: it asks
// for the key, says when it is refused, connects with the right one, loads
// artifact images with it (an <img> cannot send a header), keeps it across a
// reload and never leaves it in the address bar.
func TestWebUIAPIKey(t *testing.T) {
	g := NewWithT(t)
	const key = "s3cret-key"
	e := start(t, "PICOBOT_API_KEY="+key)
	chartID := e.chartID
	u := openUI(t, e.browser, e.serve.url+"/", e.shots)
	u.wait("the key form", `() => !document.getElementById('auth-form').hidden && document.getElementById('conn-status').dataset.state === 'auth'`)
	g.Expect(u.eval(`() => document.activeElement.id`).Str()).To(Equal("api-key"), "the key field has focus")
	u.el("#api-key").MustInput("wrong-key")
	u.page.Keyboard.MustType(input.Enter)
	u.wait("the wrong key to be refused", `() => !document.getElementById('auth-form').hidden &&
	  document.querySelector('#auth-form label').textContent.includes('refused')`)
	u.shot("api-key-refused")
	u.el("#api-key").MustInput(key)
	u.page.Keyboard.MustType(input.Enter)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the ready agent to be chosen", `() => document.getElementById('agent-select').value === 'assistant'`)

	u.send("show me the chart")
	u.waitLastTurn("done")
	u.wait("the chart to load with the key", `() => {
	  const img = document.querySelector('#messages .turn:last-child img.artifact-img');
	  return img && img.complete && img.naturalWidth === 320;
	}`)
	g.Expect(u.eval(`() => document.querySelector('#messages .turn:last-child img.artifact-img').getAttribute('src')`).Str()).
		To(Equal("/api/v1/artifacts/" + chartID + "?key=" + key))
	u.shot("api-key-chart")

	u.reload()
	u.wait("the stored key to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the history", `() => document.getElementById('messages').textContent.includes('show me the chart')`)
	g.Expect(u.eval(`() => document.getElementById('auth-form').hidden`).Bool()).To(BeTrue())
	g.Expect(u.eval(`() => location.href`).Str()).NotTo(ContainSubstring(key))
	g.Expect(u.problems()).To(BeEmpty(), "no script errors or CSP violations")
}
