package terminal

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestAskOneAgent(t *testing.T) {
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, nil), "")
	env := []string{"PICOBOT_URL=" + srv.url}

	t.Run("reply on stdout, tools on stderr with -v", func(t *testing.T) {
		g := NewWithT(t)
		llm.Script(
			fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_1", Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
			fakellm.Turn{Text: "The answer is 42."},
		)
		r := ask(t, "", env, "-v", "what", "is", "6*7?")
		g.Expect(r.code).To(Equal(0), r.stderr)
		g.Expect(r.stdout).To(Equal("The answer is 42.\n"))
		g.Expect(r.stderr).To(ContainSubstring(`[tool] calculator {"function":"evaluate","expression":"6*7"}`))
		g.Expect(r.stderr).To(ContainSubstring("[result] calculator: 42"))
		g.Expect(r.stderr).To(ContainSubstring("[session] web:assistant/cli-"))
		last := llm.Requests()[len(llm.Requests())-1]
		g.Expect(last.Messages[1].Content).To(Equal("what is 6*7?"), "the words make one message")
	})

	t.Run("text from stdin, flags after it, own chat", func(t *testing.T) {
		g := NewWithT(t)
		llm.Script(fakellm.Turn{Text: "Read you."})
		r := ask(t, "a message\nover two lines\n", env, "-", "--chat", "pipe")
		g.Expect(r.code).To(Equal(0), r.stderr)
		g.Expect(r.stdout).To(Equal("Read you.\n"))
		g.Expect(r.stderr).To(BeEmpty())
		last := llm.Requests()[len(llm.Requests())-1]
		g.Expect(last.Messages).To(HaveLen(2), "a new chat starts a new session")
		g.Expect(last.Messages[1].Content).To(Equal("a message\nover two lines\n"))
	})

	t.Run("slash command", func(t *testing.T) {
		g := NewWithT(t)
		r := ask(t, "", env, "--chat", "pipe", "/sessions")
		g.Expect(r.code).To(Equal(0), r.stderr)
		g.Expect(r.stdout).To(HavePrefix("Recent conversations:\n* default"))
	})

	t.Run("a slash command that fails exits 1", func(t *testing.T) {
		g := NewWithT(t)
		r := ask(t, "", env, "--chat", "pipe", "/switch", "nope")
		g.Expect(r.code).To(Equal(1), r.stdout)
		g.Expect(r.stdout).To(BeEmpty())
		g.Expect(r.stderr).To(HavePrefix("picobot ask: /switch: no conversation"))
		g.Expect(r.stderr).To(ContainSubstring("nope"))
		r = ask(t, "", env, "--chat", "pipe", "/switch")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stderr).To(ContainSubstring("Usage: /switch <dialog_id>"))
	})

	t.Run("unknown agent", func(t *testing.T) {
		g := NewWithT(t)
		r := ask(t, "", env, "--agent", "nobody", "hi")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stdout).To(BeEmpty())
		g.Expect(r.stderr).To(Equal(`picobot ask: no agent "nobody" at ` + srv.url + ": pick one of assistant with --agent\n"))
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			args []string
			want string
		}{
			{"no text", nil, "picobot ask: no message: give the text as an argument, or - to read it from stdin"},
			{"empty stdin", []string{"-"}, "picobot ask: no message"},
			{"unknown flag", []string{"--bogus", "hi"}, "flag provided but not defined: -bogus"},
			{"bad chat", []string{"--chat", "a:b", "hi"}, `picobot ask: --chat "a:b" must not contain ':' or '/'`},
			{"bad url", []string{"--url", "127.0.0.1:8080", "hi"}, "picobot ask: --url: gateway URL \"127.0.0.1:8080\" must start with http:// or https://"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				r := ask(t, "", env, tt.args...)
				g.Expect(r.code).To(Equal(2), r.stderr)
				g.Expect(r.stdout).To(BeEmpty())
				g.Expect(r.stderr).To(ContainSubstring(tt.want))
			})
		}
	})

	t.Run("help", func(t *testing.T) {
		g := NewWithT(t)
		r := ask(t, "", env, "-h")
		g.Expect(r.code).To(Equal(0))
		g.Expect(r.stdout).To(ContainSubstring("Usage: picobot ask [flags] <text>"))
		g.Expect(r.stderr).To(BeEmpty())
	})
}

func TestAskSeveralAgents(t *testing.T) {
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"alpha", "beta"}, []string{"keyless"}), "")
	env := []string{"PICOBOT_URL=" + srv.url}

	t.Run("no agent named", func(t *testing.T) {
		g := NewWithT(t)
		r := ask(t, "", env, "hi")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stderr).To(Equal("picobot ask: the gateway has several agents (alpha, beta, keyless (not ready)): pick one with --agent\n"))
	})

	t.Run("named agent answers", func(t *testing.T) {
		g := NewWithT(t)
		llm.Script(fakellm.Turn{Text: "beta here"})
		r := ask(t, "", env, "--agent", "beta", "who are you?")
		g.Expect(r.code).To(Equal(0), r.stderr)
		g.Expect(r.stdout).To(Equal("beta here\n"))
	})

	t.Run("agent without a model", func(t *testing.T) {
		g := NewWithT(t)
		r := ask(t, "", env, "--agent", "keyless", "hi")
		g.Expect(r.code).To(Equal(1))
		g.Expect(r.stdout).To(BeEmpty())
		g.Expect(r.stderr).To(HavePrefix("picobot ask: "))
		g.Expect(r.stderr).To(ContainSubstring("agent keyless has no usable model"))
		g.Expect(r.stderr).To(ContainSubstring("PICOBOT_SECRET_MISSING_APIKEY"), "the fix is named")
		g.Expect(strings.Count(r.stderr, "\n")).To(Equal(1), "one line")
	})
}

func TestAskServerDown(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	url := "http://" + ln.Addr().String()
	g.Expect(ln.Close()).To(Succeed())

	r := ask(t, "", nil, "--url", url, "hi")
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.stdout).To(BeEmpty())
	g.Expect(r.stderr).To(Equal("picobot ask: cannot reach the gateway at " + url +
		" (connect: connection refused): start it with `picobot serve`, or point --url (or PICOBOT_URL) at it\n"))

	// PICOBOT_URL is the default of --url.
	r = ask(t, "", []string{"PICOBOT_URL=" + url}, "hi")
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.stderr).To(ContainSubstring("cannot reach the gateway at " + url))
}

func TestAskAPIKey(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, nil), "", "PICOBOT_API_KEY=s3cret")

	r := ask(t, "", []string{"PICOBOT_URL=" + srv.url}, "hi")
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.stderr).To(HavePrefix("picobot ask: the gateway at " + srv.url +
		" refused the API key: pass --api-key or set PICOBOT_API_KEY (missing or wrong API key"))
	g.Expect(strings.Count(r.stderr, "\n")).To(Equal(1), "one line")

	llm.Script(fakellm.Turn{Text: "authorised"}, fakellm.Turn{Text: "again"})
	r = ask(t, "", []string{"PICOBOT_URL=" + srv.url, "PICOBOT_API_KEY=s3cret"}, "hi")
	g.Expect(r.code).To(Equal(0), r.stderr)
	g.Expect(r.stdout).To(Equal("authorised\n"))
	r = ask(t, "", []string{"PICOBOT_URL=" + srv.url}, "--api-key", "s3cret", "hi")
	g.Expect(r.code).To(Equal(0), r.stderr)
	g.Expect(r.stdout).To(Equal("again\n"))
}

// Ctrl+C during `picobot ask` stops the turn on the gateway too.
func TestAskInterrupted(t *testing.T) {
	g := NewWithT(t)
	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, nil), "")
	llm.Script(fakellm.Turn{Text: "never", Delay: time.Minute})

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, picobotBin, "ask", "--chat", "interrupted", "take your time")
	cmd.Env = append(cleanEnv(), "PICOBOT_URL="+srv.url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	g.Expect(cmd.Start()).To(Succeed())
	g.Eventually(func() int { return len(llm.Requests()) }).WithTimeout(hangGuard).Should(Equal(1))
	g.Expect(cmd.Process.Signal(os.Interrupt)).To(Succeed())
	err := cmd.Wait()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "%v", err)
	g.Expect(exit.ExitCode()).To(Equal(1))
	g.Expect(errb.String()).To(Equal("picobot ask: the turn was stopped; what it did so far is kept\n"))

	// The gateway stopped it: the chat takes the next message at once.
	llm.Script(fakellm.Turn{Text: "free again"})
	r := ask(t, "", []string{"PICOBOT_URL=" + srv.url}, "--chat", "interrupted", "hello?")
	g.Expect(r.code).To(Equal(0), r.stderr)
	g.Expect(r.stdout).To(Equal("free again\n"))
}
