package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

// warmServers returns the pids of the warm sandboxes' exec servers whose
// workspace lies in root.
func warmServers(root string) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.HasPrefix(b, []byte("picobot-warm-sandbox\x00"+root)) {
			out = append(out, pid)
		}
	}
	return out
}

// TestWarmSandboxes drives `picobot serve` through two sessions: each
// session's programs run in a warm sandbox of its own (its exec server is
// their namespace's init), one cannot see the other's workspace, /tmp or
// processes, a warm sandbox killed under a session is replaced on its next
// call, health says warm sandboxes are on, and kill -9 of the server leaves
// no tool process and no warm sandbox behind.
func TestWarmSandboxes(t *testing.T) {
	if !sandbox.Probe().Namespaces {
		t.Skipf("LOUD SKIP: this kernel refuses user namespaces, so there are no warm sandboxes: %s", sandbox.Probe())
	}
	g := NewWithT(t)
	dir := t.TempDir()
	state, err := os.MkdirTemp("/var/tmp", "picobot-e2e-warm-")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = os.RemoveAll(state) }()
	llm := fakellm.New()
	defer llm.Close()
	writeAgent(t, dir, llm.URL(), codingTools)
	mark := "picobot-e2e-warm-" + strconv.Itoa(os.Getpid())
	init1 := `head -c 20 /proc/1/cmdline; echo`

	p := serveArgs(t, dir, []string{"--addr", "127.0.0.1:0", "--state", state}, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY="+modelKey)
	// turn runs calls in a turn of chat after the done ones of its earlier
	// turns (the script counts a chat's tool results) and returns the
	// chat's results.
	turn := func(chat, id string, done int, calls ...fakellm.Call) []string {
		t.Helper()
		s := &script{calls: append(make([]fakellm.Call, done), calls...)}
		llm.Respond(s.respond)
		g.Expect(say(t, p.url, chat, id, "go")).To(Equal("done"))
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.results
	}

	one := turn("tab1", "m1", 0,
		call("bash", map[string]any{"command": "echo s1-tmp > /tmp/s1-tmp-file; echo s1-ws > s1-ws-file; " + init1}),
		call("exec", map[string]any{"command": sandboxtest.MarkEnv + "=" + mark + " setsid sleep 300 & sleep 300", "background": true}))
	g.Expect(one[0]).To(Equal("picobot-warm-sandbox\n[exit code 0]"))
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(HaveLen(1))
	g.Expect(warmServers(state)).To(HaveLen(1))

	two := turn("tab2", "m2", 0,
		call("bash", map[string]any{"command": `ls -a /tmp; cat ` + state + `/workspaces/*/*/*/s1-ws-file; ls ..; cat /proc/[0-9]*/cmdline | tr '\0' ' '; ` + init1}))
	t.Logf("the second session saw:\n%s", two[0])
	g.Expect(two[0]).NotTo(ContainSubstring("s1-tmp"))
	g.Expect(two[0]).NotTo(ContainSubstring("s1-ws\n"))
	g.Expect(two[0]).To(ContainSubstring("ls: cannot open directory '..': Permission denied"))
	g.Expect(two[0]).NotTo(ContainSubstring("sleep 300"))
	g.Expect(two[0]).To(ContainSubstring("picobot-warm-sandbox\n"))
	servers := warmServers(state)
	g.Expect(servers).To(HaveLen(2))

	// Health says so.
	res, err := http.Get(p.url + "/api/v1/health")
	g.Expect(err).NotTo(HaveOccurred())
	var health struct {
		Checks []gateway.Check `json:"checks"`
	}
	g.Expect(json.NewDecoder(res.Body).Decode(&health)).To(Succeed())
	_ = res.Body.Close()
	g.Expect(health.Checks).To(ContainElement(HaveField("Name", "tool sandbox: warm tool sandboxes")))
	for _, c := range health.Checks {
		if c.Name == "tool sandbox: warm tool sandboxes" {
			g.Expect(c.OK).To(BeTrue(), c.Message)
		}
	}

	// kill -9 both warm sandboxes: the first session's background program
	// ends with its own, and the next call of each session runs in a new
	// one.
	for _, pid := range servers {
		g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
	}
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(BeEmpty())
	one = turn("tab1", "m3", 2,
		call("bash", map[string]any{"command": "cat /tmp/s1-tmp-file s1-ws-file; " + init1}),
		call("exec", map[string]any{"command": sandboxtest.MarkEnv + "=" + mark + " setsid sleep 300 & sleep 300", "background": true}))
	g.Expect(one).To(HaveLen(4))
	g.Expect(one[2]).To(Equal("s1-tmp\ns1-ws\npicobot-warm-sandbox\n[exit code 0]"))
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(HaveLen(1))
	g.Expect(warmServers(state)).To(HaveLen(1))
	g.Expect(warmServers(state)).NotTo(ContainElement(servers[0]))
	two = turn("tab2", "m4", 1, call("bash", map[string]any{"command": "echo back"}))
	g.Expect(two).To(HaveLen(2))
	g.Expect(two[1]).To(Equal("back\n[exit code 0]"))
	g.Expect(warmServers(state)).To(HaveLen(2))

	// A stateless request (the OpenAI-compatible endpoint with the whole
	// conversation in the request, here a system message) runs its call in
	// a warm sandbox of its scratch workspace, which closes with the
	// request instead of staying for the idle time.
	st := &script{calls: []fakellm.Call{call("bash", map[string]any{"command": init1})}}
	llm.Respond(st.respond)
	res, err = http.Post(p.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"assistant","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"go"}]}`))
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	g.Expect(res.StatusCode).To(Equal(http.StatusOK), "%s", body)
	st.mu.Lock()
	g.Expect(st.results).To(Equal([]string{"picobot-warm-sandbox\n[exit code 0]"}), "it ran in a warm sandbox")
	st.mu.Unlock()
	g.Eventually(func() []int { return warmServers(state) }).WithTimeout(10*time.Second).Should(HaveLen(2), "only the two sessions' sandboxes remain")

	// kill -9 `picobot serve`: nothing of its tools survives it.
	g.Expect(p.cmd.Process.Kill()).To(Succeed())
	<-p.done
	g.Eventually(func() []int { return append(sandboxtest.Marked(mark), warmServers(state)...) }).
		WithTimeout(10 * time.Second).Should(BeEmpty())
}
