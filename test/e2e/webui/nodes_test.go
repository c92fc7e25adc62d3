package webui

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/input"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/nodeproc"
)

// TestWebUIDevices decides on real `picobot node` processes from the
// Devices section of Configuration · Health in headless Chromium, against a
// `picobot serve` that needs an API key: a new node shows as pending
// without a reload, Approve approves it (the REST API and the node itself
// say so), Reject refuses a second node and its process ends, and Revoke
// disconnects the first and ends its process. The section is checked for
// layout at 1280x800 and 390x844.
func TestWebUIDevices(t *testing.T) {
	g := NewWithT(t)
	// The page's polls, the nodes' connections and the test's REST calls
	// share the key's rate limit (10/s).
	g.SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
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
	yaml := `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: model-api-key, key: apiKey}}
`
	g.Expect(os.WriteFile(filepath.Join(dir, "assistant.yaml"), []byte(yaml), 0o600)).To(Succeed())
	const key = "sk-devices-0123456789"
	srv := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test", "PICOBOT_API_KEY="+key)
	c, err := client.New(srv.url, client.Options{APIKey: key})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nodeState := func(id string) func() (client.Node, error) {
		return func() (client.Node, error) {
			list, err := c.Nodes(ctx, "")
			for _, n := range list {
				if n.ID == id {
					return n, err
				}
			}
			return client.Node{}, err
		}
	}

	// The user signs in with the key and opens Configuration · Health.
	u := openUI(t, browser, srv.url+"/", shots)
	u.page.MustSetViewport(1280, 800, 1, false)
	u.wait("the key form", `() => !document.getElementById('auth-form').hidden`)
	u.el("#api-key").MustInput(key)
	u.page.Keyboard.MustType(input.Enter)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.click("#health-tab")
	u.wait("the empty Devices section", `() => document.getElementById('nodes-status').textContent.startsWith('No paired devices.')`)

	// A new node shows as pending while the view is open (no reload, no
	// click on Refresh).
	laptop := nodeproc.Start(t, picobotBin, srv.url, key, t.TempDir(), "laptop")
	laptopID := laptop.ID(g)
	row := func(id string) string { return `#nodes li.node[data-node-id="` + id + `"]` }
	u.wait("the pending node", `(sel) => {
	  const li = document.querySelector(sel);
	  return li && li.dataset.state === 'pending' && li.querySelector('.node-state').textContent === 'pending · online';
	}`, row(laptopID))
	g.Expect(u.text(row(laptopID) + " .node-name")).To(Equal("laptop"))
	g.Expect(u.text(row(laptopID) + " .node-caps")).To(ContainSubstring("run"))
	g.Expect(u.eval(`(sel) => [...document.querySelectorAll(sel + ' button')].map((b) => b.textContent).join('|')`, row(laptopID)).Str()).
		To(Equal("Approve|Reject"))
	g.Expect(nodeState(laptopID)()).To(And(HaveField("State", "pending"), HaveField("Connected", true)))
	fits := func(what string, width, height int) {
		t.Helper()
		u.page.MustSetViewport(width, height, 1, width < 600)
		u.wait("the layout at the new size", `(w) => innerWidth === w`, width)
		g.Expect(u.eval(`() => document.documentElement.scrollWidth <= innerWidth &&
		  [...document.querySelectorAll('#nodes li.node, #nodes li.node > *, #nodes button, #nodes-refresh')].every((e) => {
		    const r = e.getBoundingClientRect();
		    return r.left >= -0.5 && r.right <= innerWidth + 0.5;
		  })`).Bool()).To(BeTrue(), "the Devices section fits %d px (%s)", width, what)
		u.el("#nodes").MustScrollIntoView()
		u.shot("devices-" + what)
	}
	fits("pending", 390, 844)
	fits("pending", 1280, 800)

	// Approve: the gateway stores it and the node hears it.
	u.click(row(laptopID) + " .node-approve")
	u.wait("the approved node", `(sel) => document.querySelector(sel).dataset.state === 'approved'`, row(laptopID))
	g.Expect(u.text("#nodes-status")).To(Equal("Node " + laptopID + ": approved."))
	g.Expect(u.eval(`(sel) => [...document.querySelectorAll(sel + ' button')].map((b) => b.textContent).join('|')`, row(laptopID)).Str()).
		To(Equal("Revoke"))
	g.Expect(nodeState(laptopID)()).To(And(HaveField("State", "approved"), HaveField("Connected", true)))
	g.Eventually(laptop.Stderr).WithTimeout(30 * time.Second).Should(ContainSubstring("state=approved"))

	// A second node: Reject refuses it; the node is told and ends.
	stranger := nodeproc.Start(t, picobotBin, srv.url, key, t.TempDir(), "stranger")
	strangerID := stranger.ID(g)
	u.wait("the second node, pending first in the list", `(id) => {
	  const li = document.querySelector('#nodes li.node');
	  return li && li.dataset.nodeId === id && li.dataset.state === 'pending';
	}`, strangerID)
	fits("approved-and-pending", 390, 844)
	fits("approved-and-pending", 1280, 800)
	u.click(row(strangerID) + " .node-reject")
	u.wait("the rejected node", `(sel) => document.querySelector(sel).dataset.state === 'rejected'`, row(strangerID))
	g.Expect(u.text("#nodes-status")).To(Equal("Node " + strangerID + ": rejected."))
	g.Expect(u.eval(`(sel) => document.querySelectorAll(sel + ' button').length`, row(strangerID)).Int()).To(BeZero())
	g.Eventually(stranger.Done()).WithTimeout(30*time.Second).Should(BeClosed(), stranger.Stderr)
	g.Expect(stranger.Err()).To(HaveOccurred())
	g.Expect(stranger.Stderr()).To(ContainSubstring("rejected"))
	g.Expect(nodeState(strangerID)()).To(HaveField("State", "rejected"))
	g.Expect(nodeState(laptopID)()).To(And(HaveField("State", "approved"), HaveField("Connected", true)), "the other node is untouched")

	// Revoke the first: it is disconnected and its process ends; the list
	// shows it offline.
	u.click(row(laptopID) + " .node-revoke")
	u.wait("the revoked node", `(sel) => document.querySelector(sel).dataset.state === 'revoked'`, row(laptopID))
	g.Expect(u.text("#nodes-status")).To(Equal("Node " + laptopID + ": revoked."))
	g.Eventually(laptop.Done()).WithTimeout(30*time.Second).Should(BeClosed(), laptop.Stderr)
	g.Expect(laptop.Stderr()).To(ContainSubstring("revoked"))
	g.Eventually(nodeState(laptopID)).WithTimeout(30 * time.Second).
		Should(And(HaveField("State", "revoked"), HaveField("Connected", false)))
	u.wait("the revoked node offline", `(sel) => document.querySelector(sel + ' .node-state').textContent === 'revoked · offline'`, row(laptopID))
	g.Expect(u.eval(`() => [...document.querySelectorAll('#nodes li.node')].map((li) => li.dataset.state).join('|')`).Str()).
		To(Equal("rejected|revoked"))
	fits("decided", 390, 844)
	g.Expect(u.unnamedControls(5)).To(BeEmpty(), "every control has an accessible name")
	g.Expect(u.problems()).To(BeEmpty(), "no script errors or CSP violations")
}
