package terminal

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/controlplane"
)

// commands are every command `picobot --help` lists.
var commands = []string{"serve", "browser", "health", "session", "sandbox-server", "gateway", "migrate",
	"dead-letters", "ask", "chat", "version", "completion"}

// Help is asked for, so it goes to stdout with exit 0; a bad flag is a
// usage error: what is wrong and the usage on stderr, exit 2.
func TestEveryCommandHelps(t *testing.T) {
	r := picobot(t, "", nil, "--help")
	NewWithT(t).Expect(r.code).To(Equal(0))
	NewWithT(t).Expect(r.stderr).To(BeEmpty())
	for _, c := range commands {
		NewWithT(t).Expect(r.stdout).To(MatchRegexp(`(?m)^  `+c+` `), "picobot --help lists %s", c)
	}
	for _, c := range commands {
		t.Run(c, func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				g := NewWithT(t)
				r := picobot(t, "", nil, c, h)
				g.Expect(r.code).To(Equal(0), "%s %s: %s", c, h, r.stderr)
				g.Expect(r.stderr).To(BeEmpty())
				g.Expect(r.stdout).To(HavePrefix("Usage: picobot " + c))
			}
			g := NewWithT(t)
			r := picobot(t, "", nil, c, "--no-such-flag")
			g.Expect(r.code).To(Equal(2), r.stdout)
			g.Expect(r.stdout).To(BeEmpty())
			g.Expect(r.stderr).To(ContainSubstring("flag provided but not defined: -no-such-flag"))
			g.Expect(r.stderr).To(ContainSubstring("Usage: picobot " + c))
		})
	}
	r = picobot(t, "", nil, "frobnicate")
	NewWithT(t).Expect(r.code).To(Equal(2))
	NewWithT(t).Expect(r.stderr).To(HavePrefix("picobot: unknown command \"frobnicate\"\nUsage: picobot <command>"))
}

func TestVersion(t *testing.T) {
	g := NewWithT(t)
	root, err := controlplane.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	g.Expect(err).NotTo(HaveOccurred(), "the tests run in a git checkout")
	rev := strings.TrimSpace(string(head))[:12]

	r := picobot(t, "", []string{"PICOBOT_URL="}, "version")
	g.Expect(r.code).To(Equal(0), r.stderr)
	g.Expect(r.stdout).To(MatchRegexp(`^picobot (\(devel\)|v[^ ]+) \(` + rev + `(, modified)?, [0-9TZ:-]+\) go1\.[0-9.]+\n`))

	llm := fakellm.New()
	defer llm.Close()
	srv := serve(t, writeAgents(t, llm.URL(), []string{"assistant"}, nil), "", "PICOBOT_API_KEY=s3cret")
	r = picobot(t, "", nil, "version", "--url", srv.url, "--api-key", "s3cret", "--json")
	g.Expect(r.code).To(Equal(0), r.stderr)
	var out struct {
		Client, Gateway struct{ Version, Revision, Go string }
		URL             string
	}
	g.Expect(json.Unmarshal([]byte(r.stdout), &out)).To(Succeed(), r.stdout)
	g.Expect(out.Client.Revision).To(HavePrefix(rev))
	g.Expect(out.Gateway.Revision).To(Equal(out.Client.Revision), "the same binary serves")
	g.Expect(out.Gateway.Go).NotTo(BeEmpty())
	g.Expect(out.URL).To(Equal(srv.url))

	// The gateway's build is behind the key; a gateway named on the command
	// line that refuses or is down is a failure.
	r = picobot(t, "", nil, "version", "--url", srv.url)
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.stderr).To(ContainSubstring("failed to get the gateway's version"))
	srv.stop()
	r = picobot(t, "", nil, "version", "--url", srv.url, "--api-key", "s3cret")
	g.Expect(r.code).To(Equal(1))
}

// The bash script completes commands, and a command's flags from its own
// -h, run in a real bash.
func TestCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash is part of the test machine: %v", err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		script := `source <("$PB" completion bash)
COMP_WORDS=("$PB" ` + strings.Join(words, " ") + `)
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_picobot
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(cleanEnv(), "PB="+picobotBin)
		out, err := cmd.CombinedOutput()
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), string(out))
		return strings.Fields(string(out))
	}
	g := NewWithT(t)
	g.Expect(complete("se")).To(ConsistOf("serve", "session"))
	g.Expect(complete("serve", "--a")).To(ConsistOf("--addr", "--api-key", "--audit-retention"))
	g.Expect(complete("ask", "--ch")).To(ConsistOf("--chat"))

	for _, sh := range []string{"zsh", "fish"} {
		r := picobot(t, "", nil, "completion", sh)
		g.Expect(r.code).To(Equal(0), r.stderr)
		g.Expect(r.stdout).To(ContainSubstring("picobot"))
	}
	r := picobot(t, "", nil, "completion", "tcsh")
	g.Expect(r.code).To(Equal(1))
	g.Expect(r.stderr).To(ContainSubstring(`unknown shell "tcsh": want bash, zsh or fish`))
}
