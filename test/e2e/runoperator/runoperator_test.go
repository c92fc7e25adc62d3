// Package runoperator runs `make run-operator`'s script (hack/run-local.sh,
// which runs hack/localcluster) as a newcomer would, and chats through what
// it prints: the `picobot ask` line, run verbatim, must get an answer from a
// session pod through the gateway.
package runoperator

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/test/controlplane"
)

// TestRunOperatorEndsInAChat: the script brings up the control plane,
// PostgreSQL, Redis, S3, the gateway, the operator and the local pod
// runner, applies Agent chat (demo model, no key in the environment) and
// prints the web UI and a `picobot ask` line; that line, run as printed,
// answers with the calculator's result, computed in a session pod; the
// samples' Agents say their key is a placeholder; the web UI chats and
// shows the Agent read-only (webUIInClusterMode); Ctrl-C stops everything
// and the script exits 0.
func TestRunOperatorEndsInAChat(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		if reason, fatal := controlplane.Unavailable(err); !fatal {
			t.Skip("SKIPPED LOUDLY: " + reason)
		} else {
			t.Fatal(reason)
		}
	}
	g := NewWithT(t)
	root, err := controlplane.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for name, pkg := range map[string]string{"picobot": "./runtime/cmd/picobot", "operator": "./operator/cmd", "localcluster": "./hack/localcluster"} {
		b := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		b.Dir, b.Stderr = root, os.Stderr
		g.Expect(b.Run()).To(Succeed(), "go build %s", pkg)
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	cmd := exec.Command(filepath.Join(root, "hack", "run-local.sh"), "--state", filepath.Join(dir, "state"), "--write-kubeconfig", kubeconfig)
	cmd.Dir = root
	// A newcomer without a model key; a free port instead of 8090, which
	// another run may hold.
	cmd.Env = append(withoutEnv(os.Environ(), "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PICOBOT_FAKE_LLM", "PICOBOT_NAMESPACE"),
		"BIN="+bin, "PICOBOT_ADDR=127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.Expect(cmd.Start()).To(Succeed())
	exited := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			if err := <-exited; err != nil {
				t.Logf("the script ended with %v", err)
			}
		}
	})
	go func() { exited <- cmd.Wait() }()

	// The banner: everything up, the Agent Ready and served.
	var banner []string
	ask := regexp.MustCompile(`One message: (PICOBOT_URL=(\S+) PICOBOT_API_KEY=(\S+) .*)$`)
	chatRE := regexp.MustCompile(`Terminal: +(PICOBOT_URL=\S+ PICOBOT_API_KEY=\S+ .*)$`)
	var askLine, chatLine, gatewayURL, apiKey string
	deadline := time.After(10 * time.Minute) // a cold build of the control plane takes longer; it is cached here
	for askLine == "" || !strings.Contains(strings.Join(banner, "\n"), "Ctrl-C stops everything") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the script ended before its banner; output:\n%s\nstderr:\n%s", strings.Join(banner, "\n"), stderr.String())
			}
			banner = append(banner, l)
			if m := chatRE.FindStringSubmatch(l); m != nil {
				chatLine = m[1]
			}
			if m := ask.FindStringSubmatch(l); m != nil {
				askLine, gatewayURL, apiKey = m[1], m[2], m[3]
			}
		case <-deadline:
			t.Fatalf("no banner; output:\n%s\nstderr:\n%s", strings.Join(banner, "\n"), stderr.String())
		}
	}
	text := strings.Join(banner, "\n")
	g.Expect(text).To(ContainSubstring("Web UI:      " + gatewayURL + "/"))
	g.Expect(chatLine).To(HaveSuffix("chat --agent chat"))
	g.Expect(askLine).To(HaveSuffix(`ask --agent chat "what is 6*7?"`))
	g.Expect(askLine).To(ContainSubstring(filepath.Join(bin, "picobot")))

	// The printed line, as a person would paste it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", askLine).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(string(out)).To(ContainSubstring("42"))
	g.Expect(string(out)).To(ContainSubstring("calculator"))

	// The chat ran in a session pod of Agent chat; the samples' Agents
	// have a placeholder key and say so.
	kubectl := func(args ...string) string {
		c := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
		if assets, err := controlplane.AssetsDir(); err == nil {
			if _, err := exec.LookPath("kubectl"); err != nil {
				c = exec.Command(filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
			}
		}
		b, err := c.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s", b)
		return string(b)
	}
	g.Expect(kubectl("get", "pods", "-n", "demo", "-l", "agents.picobot.io/agent=chat", "-o", "name")).To(ContainSubstring("pod/chat-"))
	g.Expect(kubectl("get", "agent", "assistant", "-n", "demo", "-o", `jsonpath={.status.conditions[?(@.type=="ModelResolved")].reason}`)).To(Equal("PlaceholderKey"))
	sessionLogs, err := filepath.Glob(filepath.Join(dir, "state", "pods", "demo_chat-*.log"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sessionLogs).NotTo(BeEmpty())
	served := false
	for _, l := range sessionLogs {
		b, _ := os.ReadFile(l)
		served = served || strings.Contains(string(b), "Turn done")
	}
	g.Expect(served).To(BeTrue(), "a session pod's log records the turn")

	// The web UI the banner points to, with the printed key.
	shots := os.Getenv("PICOBOT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	g.Expect(os.MkdirAll(shots, 0o755)).To(Succeed())
	t.Run("web UI", func(t *testing.T) { webUIInClusterMode(t, gatewayURL, apiKey, shots) })
	t.Run("terminal", func(t *testing.T) { chatInTerminal(t, chatLine) })

	// Ctrl-C: everything stops, the kubeconfig goes, the script exits 0.
	g.Expect(syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)).To(Succeed())
	stopped = true
	g.Expect(<-exited).To(Succeed(), "stderr:\n%s", stderr.String())
	g.Expect(kubeconfig).NotTo(BeAnExistingFile())
	g.Expect(stderr.String()).To(ContainSubstring("localcluster: stopping"))
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
