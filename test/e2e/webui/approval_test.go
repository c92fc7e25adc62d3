package webui

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestWebUIApprovals: in headless Chromium the web UI shows an exec approval
// request with the command and Approve/Deny; Approve runs it (real bash in
// the workspace), Deny refuses it, and a request left alone is refused at
// approvalTimeout with the buttons gone.
func TestWebUIApprovals(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	yaml := `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: assistant}
spec:
  model: {provider: openai, model: fake, baseURL: ` + llm.URL() + `, apiKeySecretRef: {name: model-api-key, key: apiKey}}
  tools:
    allow: [exec]
    exec: {ask: always, approvalTimeout: 3s}
`
	g.Expect(os.WriteFile(filepath.Join(dir, "assistant.yaml"), []byte(yaml), 0o600)).To(Succeed())
	srv := serve(t, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	u := openUI(t, launchBrowser(t), srv.url+"/", t.TempDir())
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	ran := func(x string) bool {
		m, _ := filepath.Glob(filepath.Join(dir, ".picobot", "workspaces", "*", "*", "*", "approved-"+x+".txt"))
		return len(m) > 0
	}
	const item = "#messages .turn:last-child .approval"
	ask := func(x string) {
		llm.Script(
			fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "exec", Args: `{"command":"touch approved-` + x + `.txt && echo ran-` + x + `"}`}}},
			fakellm.Turn{Text: "Finished " + x + "."},
		)
		u.send("run " + x)
		u.wait("the approval request", `(sel) => document.querySelector(sel).dataset.outcome === 'waiting'`, item)
		g.Expect(u.text(item + " .approval-command")).To(Equal("touch approved-" + x + ".txt && echo ran-" + x))
		g.Expect(u.text(item + " .approval-title")).To(MatchRegexp(`^Approve this exec command\? \([A-Z2-9]{4}\)$`))
		g.Expect(u.text(item + " .approval-reason")).To(ContainSubstring("refused without an answer within 3 s"))
		g.Expect(ran(x)).To(BeFalse(), "nothing runs before the answer")
	}

	ask("A")
	u.shot("approval-waiting")
	u.click(item + " .approval-approve")
	u.waitLastTurn("done")
	g.Expect(u.text(item + " .approval-outcome")).To(Equal("Approved: the command ran."))
	g.Expect(u.text("#messages .turn:last-child .tool-call .tool-status")).To(Equal("done"))
	g.Expect(ran("A")).To(BeTrue())
	u.shot("approval-approved")

	ask("D")
	u.click(item + " .approval-deny")
	u.waitLastTurn("done")
	g.Expect(u.text(item + " .approval-outcome")).To(Equal("Denied: the command was not run."))
	g.Expect(u.text("#messages .turn:last-child .tool-call .tool-status")).To(Equal("error"))
	g.Expect(ran("D")).To(BeFalse())

	ask("T")
	u.waitLastTurn("done")
	g.Expect(u.text(item + " .approval-outcome")).To(Equal("No answer in time: the command was refused."))
	g.Expect(u.eval(`(sel) => document.querySelector(sel + ' .approval-approve').checkVisibility()`, item).Bool()).To(BeFalse())
	g.Expect(ran("T")).To(BeFalse())
	g.Expect(u.sentFrames()).To(ContainElements("approve"))
	g.Expect(u.problems()).To(BeEmpty())
}
