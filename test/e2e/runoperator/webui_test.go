package runoperator

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/input"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"
	. "github.com/onsi/gomega"
)

// waitTimeout bounds each wait for the page; a hang guard, not a
// performance assertion.
const waitTimeout = 60 * time.Second

// chromium is the browser the test drives: $PICOBOT_CHROMIUM, else
// Debian's (hack/chromium.sh installs it).
func chromium(t *testing.T) string {
	bin := os.Getenv("PICOBOT_CHROMIUM")
	if bin == "" {
		bin = "/usr/lib/chromium/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("Chromium is not installed at %s (%v): install it with hack/chromium.sh or set $PICOBOT_CHROMIUM", bin, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED LOUDLY: " + msg)
	}
	return bin
}

// webUIInClusterMode is the newcomer's walk through the web UI the banner
// points to, in headless Chromium: the key form takes the printed API key,
// the ready Agent is chosen, a message is answered by the session pod, and
// the Configuration view shows Agent chat as the cluster has it, read-only,
// with the kubectl command that changes it; at 1280x800 and 390x844 nothing
// scrolls sideways and the page records no script error or CSP violation.
func webUIInClusterMode(t *testing.T, gatewayURL, apiKey, shots string) {
	g := NewWithT(t)
	l := launcher.New().Bin(chromium(t)).Leakless(false).Headless(true).NoSandbox(true).UserDataDir(t.TempDir()).
		Set("disable-gpu").Set("no-first-run").Set("disable-background-networking").Set("disable-component-update").Set("disable-sync")
	u, err := l.Launch()
	g.Expect(err).NotTo(HaveOccurred())
	b := rod.New().ControlURL(u)
	g.Expect(b.Connect()).To(Succeed())
	t.Cleanup(func() { _ = b.Close(); l.Kill() })
	page, err := b.Page(proto.TargetCreateTarget{URL: ""})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = page.EvalOnNewDocument(`() => {
	  window.__problems = [];
	  window.addEventListener('error', (e) => window.__problems.push('error: ' + e.message));
	  document.addEventListener('securitypolicyviolation', (e) => window.__problems.push('CSP: ' + e.violatedDirective));
	}`)
	g.Expect(err).NotTo(HaveOccurred())
	// Each call gets its own deadline (a Timeout page's clock starts when
	// it is made).
	el := func(sel string) *rod.Element { return page.Timeout(waitTimeout).MustElement(sel) }
	shot := func(name string) {
		png, err := page.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(filepath.Join(shots, "run-operator-"+name+".png"), png, 0o600)).To(Succeed())
	}
	wait := func(what, js string) {
		t.Helper()
		guarded := `() => { try { return (` + js + `)(); } catch (_) { return false; } }`
		if err := page.Timeout(waitTimeout).Wait(rod.Eval(guarded)); err != nil {
			shot("FAILED")
			text, _ := page.Eval(`() => document.body.innerText.slice(0, 2000)`)
			t.Fatalf("waiting for %s: %v\n%v", what, err, text)
		}
	}
	page.MustSetViewport(1280, 800, 1, false)
	g.Expect(page.Timeout(waitTimeout).Navigate(gatewayURL + "/")).To(Succeed())

	wait("the key form", `() => !document.getElementById('auth-form').hidden`)
	el("#api-key").MustInput(apiKey)
	page.Keyboard.MustType(input.Enter)
	wait("the WebSocket", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	wait("the ready agent to be chosen", `() => document.getElementById('agent-select').value === 'chat'`)
	wait("the send button", `() => !document.getElementById('send').disabled`)
	el("#input").MustInput("what is 6*7?")
	page.Keyboard.MustType(input.Enter)
	wait("the answer", `() => {
	  const turns = document.querySelectorAll('#messages .turn');
	  const t = turns[turns.length - 1];
	  return t && t.dataset.status === 'done' && t.textContent.includes('42');
	}`)
	shot("chat")

	el("#health-tab").MustClick()
	wait("Agent chat's configuration", `() => document.getElementById('cfg-model').value === 'demo' && document.getElementById('agent-config').dataset.editable === 'false'`)
	g.Expect(el("#agent-config-name").MustText()).To(Equal("“chat”"))
	g.Expect(el("#agent-config-mode").MustText()).To(Equal("Read-only: cluster mode"))
	g.Expect(el(".cfg-kubectl").MustText()).To(Equal("kubectl -n demo edit agent chat"))
	g.Expect(page.MustEval(`() => document.getElementById('cfg-save').hidden && [...document.querySelectorAll('#agent-config input, #agent-config select')].every((e) => e.disabled)`).Bool()).
		To(BeTrue(), "nothing on the page can change a cluster's Agent")
	g.Expect(page.MustEval(`() => document.getElementById('cfg-api-key').placeholder`).Str()).To(HavePrefix("set (Secret demo/chat-model-key, key apiKey)"))
	fits := `() => document.documentElement.scrollWidth <= innerWidth &&
	  [...document.querySelectorAll('#agent-config input, #agent-config select, .cfg-kubectl')].every((e) => e.getBoundingClientRect().right <= innerWidth + 0.5)`
	g.Expect(page.MustEval(fits).Bool()).To(BeTrue(), "the view fits 1280 px")
	shot("config")

	page.MustSetViewport(390, 844, 1, true)
	wait("the narrow layout", `() => getComputedStyle(document.getElementById('sidebar-toggle')).display !== 'none'`)
	wait("the view to fit 390 px", fits)
	shot("config-mobile")
	g.Expect(page.MustEval(`() => window.__problems`).Arr()).To(BeEmpty(), "no script errors or CSP violations")
}
