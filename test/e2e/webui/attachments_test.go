package webui

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-rod/rod/lib/input"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// seerYAML is an agent whose model accepts images.
const seerYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: seer
spec:
  model:
    provider: openai
    model: fake
    vision: true
    baseURL: %s
    apiKeySecretRef: {name: model-api-key, key: apiKey}
`

// dropFiles builds files in the page and hands them to the UI the way a
// user's paste (into the message box) or drop (on the chat) does: each file
// is [name, type, size]; its bytes are a PNG signature when png is set,
// else letters.
const dropFiles = `(how, files, png) => {
  const dt = new DataTransfer();
  for (const [name, type, size] of files) {
    const bytes = new Uint8Array(size);
    bytes.fill(97);
    if (png) bytes.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    dt.items.add(new File([bytes], name, { type }));
  }
  if (how === 'paste') {
    document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
    return true;
  }
  const chat = document.getElementById('chat-view');
  chat.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
  const dropping = chat.classList.contains('dropping');
  chat.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  return dropping;
}`

// pendingFiles lists the chips above the message box as "name status|...".
const pendingFiles = `() => [...document.querySelectorAll('#pending-files .pending-file')].map((li) =>
  li.dataset.name + ' ' + [...li.classList].filter((c) => c !== 'pending-file').join(' ')).join('|')`

// TestWebUIAttachments attaches files the three ways a user does — the
// Attach button, a paste into the message box and a drop on the chat — in
// headless Chromium against picobot serve: images reach the fake model as
// image parts of the user message, other files the session's workspace; a
// file too large is refused in the page and one whose bytes are not the
// image it claims by the gateway, each with the reason on its chip; the
// conversation shows the files after a reload; screenshots at 1280x800 and
// 390x844 are checked for overflow.
func TestWebUIAttachments(t *testing.T) {
	g := NewWithT(t)
	shots := os.Getenv("PICOBOT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatalf("failed to create screenshot folder: %v", err)
	}
	browser := launchBrowser(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	writeAgents(t, dir, llm.URL())
	if err := os.WriteFile(filepath.Join(dir, "seer.yaml"), fmt.Appendf(nil, seerYAML, llm.URL()), 0o600); err != nil {
		t.Fatal(err)
	}
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		return fakellm.Turn{Text: fmt.Sprintf("I see %d image(s).", last.Images)}
	})
	srv := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	chartFile := filepath.Join(t.TempDir(), "chart.png")
	notesFile := filepath.Join(t.TempDir(), "notes.md")
	g.Expect(os.WriteFile(chartFile, chartPNG(t), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(notesFile, []byte("# Notes\n- buy milk\n"), 0o600)).To(Succeed())

	u := openUI(t, browser, srv.url+"/?agent=seer", shots)
	u.page.MustSetViewport(1280, 800, 1, false)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("seer to be chosen", `() => document.getElementById('agent-select').value === 'seer' && !document.getElementById('attach').disabled`)

	// The Attach button: a picked image and a text file upload at once.
	u.el("#file-input").MustSetFiles(chartFile, notesFile)
	u.wait("both files uploaded", `() => document.querySelectorAll('#pending-files .pending-file.ready').length === 2`)
	g.Expect(u.eval(`() => document.querySelector('#pending-files .pending-thumb').naturalWidth`).Int()).To(Equal(320), "the image shows as a thumbnail")
	u.el("#input").MustInput("what is in these?")
	u.shot("attach-pending")
	u.page.Keyboard.MustType(input.Enter)
	u.waitLastTurn("done")
	g.Expect(u.text("#messages .turn:last-child .msg.assistant .content")).To(Equal("I see 1 image(s)."))
	user := llm.Requests()[len(llm.Requests())-1].Messages
	g.Expect(user[len(user)-1].Images).To(Equal(1), "the model got the image as an image part")
	g.Expect(user[len(user)-1].Content).To(ContainSubstring("[notes.md](/api/v1/artifacts/"))
	g.Expect(u.eval(`() => document.getElementById('pending-files').hidden`).Bool()).To(BeTrue(), "sent files leave the box")
	g.Expect(u.text("#messages .turn:last-child .msg.user")).To(HavePrefix("what is in these?"))
	u.wait("the sent image to show in the message", `() => {
	  const img = document.querySelector('#messages .turn:last-child .msg.user .msg-files img.artifact-img');
	  return img && img.complete && img.naturalWidth === 320;
	}`)
	g.Expect(u.text("#messages .turn:last-child .msg.user .msg-files a.artifact-file")).To(Equal("notes.md"))
	copied, _ := filepath.Glob(filepath.Join(dir, ".picobot", "workspaces", "*", "seer", "*", "uploads", "notes.md"))
	g.Expect(copied).To(HaveLen(1), "the text file is in the session's workspace")
	u.wait("the conversation titled by the text, not the files", `() => document.querySelector('#sessions .session-title').textContent === 'what is in these?'`)
	u.shot("attach-sent")

	// Paste and drop; a file over the limit is refused in the page, one
	// that is not the image it says by the gateway.
	g.Expect(u.eval(dropFiles, "paste", [][]any{{"pasted.png", "image/png", 2000}}, true).Bool()).To(BeTrue())
	g.Expect(u.eval(dropFiles, "drop", [][]any{{"dropped.png", "image/png", 3000}}, true).Bool()).To(BeTrue(), "the chat shows it takes the drop")
	g.Expect(u.eval(dropFiles, "drop", [][]any{{"huge.bin", "application/octet-stream", 11 << 20}, {"fake.png", "image/png", 100}}, false).Bool()).To(BeTrue())
	u.wait("the four chips settled", `() => [...document.querySelectorAll('#pending-files .pending-file')].every((li) => !li.classList.contains('uploading')) &&
	  document.querySelectorAll('#pending-files .pending-file').length === 4`)
	g.Expect(u.eval(pendingFiles).Str()).To(Equal("pasted.png ready|dropped.png ready|huge.bin error|fake.png error"))
	g.Expect(u.text(`#pending-files [data-name="huge.bin"] .pending-state`)).To(Equal("huge.bin is 11 MiB; a file may be at most 10 MiB"))
	g.Expect(u.text(`#pending-files [data-name="fake.png"] .pending-state`)).To(ContainSubstring("fake.png says it is a PNG image (image/png) but its bytes are not"))
	g.Expect(u.eval(`() => document.getElementById('chat-view').classList.contains('dropping')`).Bool()).To(BeFalse())
	u.shot("attach-errors")

	// At 390x844 the chips wrap and nothing scrolls sideways.
	u.page.MustSetViewport(390, 844, 1, true)
	u.wait("the narrow layout", `() => getComputedStyle(document.getElementById('sidebar-toggle')).display !== 'none'`)
	noOverflow := `() => document.documentElement.scrollWidth <= innerWidth &&
	  [...document.querySelectorAll('#composer > *:not([hidden]), .pending-file')].every((e) => { const r = e.getBoundingClientRect(); return r.right <= innerWidth + 0.5 && r.left >= 0; })`
	g.Expect(u.eval(noOverflow).Bool()).To(BeTrue(), "the composer fits 390 px")
	u.shot("attach-mobile")
	u.page.MustSetViewport(1280, 800, 1, false)

	// The refused ones are removed; the message goes with the two images
	// and no text.
	u.click(`#pending-files [data-name="huge.bin"] .pending-remove`)
	u.click(`#pending-files [data-name="fake.png"] .pending-remove`)
	u.wait("two chips left", `() => document.querySelectorAll('#pending-files .pending-file').length === 2`)
	u.click("#send")
	u.waitLastTurn("done")
	g.Expect(u.text("#messages .turn:last-child .msg.assistant .content")).To(Equal("I see 2 image(s)."))

	// After a reload the messages show their files, not the lines that
	// link them.
	u.reload()
	u.wait("the history", `() => document.querySelectorAll('#messages .msg.user .msg-files img.artifact-img').length === 3`)
	g.Expect(u.text("#messages")).NotTo(ContainSubstring("in the workspace"))
	g.Expect(u.eval(`() => document.querySelector('#messages .turn .msg.user').firstChild.textContent`).Str()).To(Equal("what is in these?"))
	u.shot("attach-reloaded")
	g.Expect(strings.Join(u.problems(), "\n")).To(BeEmpty(), "no script errors or CSP violations")
}
