package webui

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/input"
	"github.com/go-rod/rod/lib/proto"
	"github.com/ysmood/gson"
)

// waitTimeout bounds every wait for the UI; the machine running the tests
// may be slow and shared, so it is generous (it is a bound, not an assertion).
const waitTimeout = 45 * time.Second

// ui drives one page of the web UI.
type ui struct {
	t     testing.TB
	page  *rod.Page
	shots string // folder of the screenshots
	// prefix (the test's name) and n (a counter) start screenshot names.
	prefix string
	n      int

	mu   sync.Mutex
	sent []string // WebSocket frames the page sent: "<type>[ <op>]"
}

// sentFrames returns the kinds of WebSocket frames the page sent so far.
func (u *ui) sentFrames() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.sent...)
}

// pageProbes records what must never happen on the page: script errors and
// Content-Security-Policy violations (index.html declares a strict policy).
const pageProbes = `() => {
  window.__problems = [];
  window.addEventListener('error', (e) => window.__problems.push('error: ' + e.message));
  window.addEventListener('unhandledrejection', (e) => window.__problems.push('unhandled rejection: ' + (e.reason && e.reason.message || e.reason)));
  document.addEventListener('securitypolicyviolation', (e) => window.__problems.push('CSP: ' + e.violatedDirective + ' blocked ' + e.blockedURI));
}`

// openUI opens url in a new page of b at desktop size.
func openUI(t testing.TB, b *rod.Browser, url, shots string) *ui {
	t.Helper()
	u := &ui{t: t, shots: shots, prefix: unsafeFile.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-")}
	page, err := b.Page(proto.TargetCreateTarget{URL: ""})
	if err != nil {
		t.Fatalf("failed to open a page: %v", err)
	}
	u.page = page.WithPanic(u.fail)
	if _, err := page.EvalOnNewDocument(pageProbes); err != nil {
		t.Fatalf("failed to install page probes: %v", err)
	}
	if err := (proto.NetworkEnable{}).Call(page); err != nil {
		t.Fatalf("failed to watch the page's network: %v", err)
	}
	go page.EachEvent(func(e *proto.NetworkWebSocketFrameSent) {
		var f struct{ Type, Op string }
		if json.Unmarshal([]byte(e.Response.PayloadData), &f) == nil {
			u.mu.Lock()
			u.sent = append(u.sent, strings.TrimSuffix(f.Type+" "+f.Op, " "))
			u.mu.Unlock()
		}
	})()
	u.page.MustSetViewport(1280, 860, 1, false)
	loaded := page.Timeout(waitTimeout).WaitNavigation(proto.PageLifecycleEventNameLoad)
	if err := page.Timeout(waitTimeout).Navigate(url); err != nil {
		t.Fatalf("failed to open %s: %v", url, err)
	}
	loaded()
	return u
}

// reload reloads the page and waits for it to load.
func (u *ui) reload() {
	u.t.Helper()
	loaded := u.page.Timeout(waitTimeout).WaitNavigation(proto.PageLifecycleEventNameLoad)
	u.page.MustReload()
	loaded()
}

// fail reports a failed browser call with a screenshot and the page's text.
func (u *ui) fail(v any) {
	u.t.Helper()
	name := u.screenshot("FAILED")
	u.t.Fatalf("browser: %v\nscreenshot: %s\n%s", v, name, u.debugState())
}

// debugState describes the page for a failure message.
func (u *ui) debugState() string {
	var out string
	err := rod.Try(func() {
		out = u.page.Timeout(5 * time.Second).MustEval(`() => JSON.stringify({
		  conn: document.getElementById('conn-status').dataset.state,
		  status: document.getElementById('sessions-status').textContent,
		  hint: document.getElementById('composer-hint').textContent,
		  sessions: [...document.querySelectorAll('#sessions li')].map((li) => (li.classList.contains('current') ? '*' : '') + li.textContent),
		  messages: document.getElementById('messages').innerText.slice(-1500),
		  problems: window.__problems,
		}, null, 1)`).Str()
	})
	if err != nil {
		return "(page state unavailable: " + err.Error() + ")"
	}
	return out
}

var unsafeFile = regexp.MustCompile(`[^a-z0-9-]+`)

// screenshot saves the viewport as <prefix>-NN-name.png and returns its path.
func (u *ui) screenshot(name string) string {
	u.n++
	path := filepath.Join(u.shots, fmt.Sprintf("%s-%02d-%s.png", u.prefix, u.n, unsafeFile.ReplaceAllString(strings.ToLower(name), "-")))
	png, err := u.page.Timeout(20*time.Second).Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	if err != nil {
		u.t.Logf("failed to take screenshot %s: %v", path, err)
		return ""
	}
	if err := os.WriteFile(path, png, 0o600); err != nil {
		u.t.Logf("failed to save screenshot %s: %v", path, err)
		return ""
	}
	return path
}

// shot takes a screenshot once the page has settled (no animation frame
// pending a render).
func (u *ui) shot(name string) {
	u.t.Helper()
	u.page.Timeout(waitTimeout).MustEvaluate(rod.Eval(`() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`).ByPromise())
	if p := u.screenshot(name); p != "" {
		u.t.Logf("screenshot %s", p)
	}
}

// wait polls js (a function returning truthy when done) until it holds. A
// js that throws (an element not there yet) counts as not done.
func (u *ui) wait(what, js string, args ...any) {
	u.t.Helper()
	guarded := `(...args) => { try { return (` + js + `)(...args); } catch (_) { return false; } }`
	if err := u.page.Timeout(waitTimeout).Wait(rod.Eval(guarded, args...)); err != nil {
		u.fail(fmt.Sprintf("waiting for %s: %v", what, err))
	}
}

// allowClipboard lets the page read and write the clipboard, as a user's
// browser asks them once.
func (u *ui) allowClipboard() {
	u.t.Helper()
	err := proto.BrowserGrantPermissions{Permissions: []proto.BrowserPermissionType{
		proto.BrowserPermissionTypeClipboardReadWrite, proto.BrowserPermissionTypeClipboardSanitizedWrite}}.Call(u.page.Browser())
	if err != nil {
		u.fail(fmt.Sprintf("failed to grant the clipboard: %v", err))
	}
}

// eval runs js and returns its result.
func (u *ui) eval(js string, args ...any) gson.JSON {
	u.t.Helper()
	return u.page.Timeout(waitTimeout).MustEval(js, args...)
}

// el waits for the element matching sel.
func (u *ui) el(sel string) *rod.Element {
	u.t.Helper()
	return u.page.Timeout(waitTimeout).MustElement(sel)
}

// click waits for sel and clicks it like a user (scrolled into view, mouse).
func (u *ui) click(sel string) {
	u.t.Helper()
	u.el(sel).MustClick()
}

// send types text into the message box and presses Enter.
func (u *ui) send(text string) {
	u.t.Helper()
	u.wait("the send button to be enabled", `() => !document.getElementById('send').disabled`)
	u.el("#input").MustInput(text)
	u.page.Keyboard.MustType(input.Enter)
}

// waitLastTurn waits for the newest turn to end with status.
func (u *ui) waitLastTurn(status string) {
	u.t.Helper()
	u.wait("the last turn to end as "+status, `(want) => {
	  const turns = document.querySelectorAll('#messages .turn');
	  const t = turns[turns.length - 1];
	  return t && t.dataset.status === want && document.getElementById('app').dataset.busy !== 'true';
	}`, status)
}

// text returns the text of the element matching sel.
func (u *ui) text(sel string) string {
	u.t.Helper()
	return u.el(sel).MustText()
}

// problems returns the script errors and CSP violations the page recorded.
func (u *ui) problems() []string {
	u.t.Helper()
	var out []string
	for _, v := range u.eval(`() => window.__problems || []`).Arr() {
		out = append(out, v.Str())
	}
	return out
}

// interactiveRoles are the accessibility roles a user operates; each needs
// a name a screen reader can say.
var interactiveRoles = map[string]bool{
	"button": true, "textbox": true, "combobox": true, "link": true, "tab": true,
	"checkbox": true, "menuitem": true, "searchbox": true, "DisclosureTriangle": true,
}

// unnamedControls lists the controls of Chromium's accessibility tree that
// have no accessible name (role and DOM node id); it fails the test when the
// tree holds fewer than min controls (the check would prove nothing).
func (u *ui) unnamedControls(minControls int) []string {
	u.t.Helper()
	res, err := proto.AccessibilityGetFullAXTree{}.Call(u.page.Timeout(waitTimeout))
	if err != nil {
		u.fail(fmt.Sprintf("failed to read the accessibility tree: %v", err))
	}
	var out []string
	controls := 0
	for _, n := range res.Nodes {
		if n.Ignored || n.Role == nil || !interactiveRoles[n.Role.Value.Str()] {
			continue
		}
		controls++
		if n.Name == nil || strings.TrimSpace(n.Name.Value.Str()) == "" {
			out = append(out, fmt.Sprintf("%s (backend node %d)", n.Role.Value.Str(), n.BackendDOMNodeID))
		}
	}
	if controls < minControls {
		u.fail(fmt.Sprintf("the accessibility tree has %d controls, expected at least %d", controls, minControls))
	}
	return out
}
