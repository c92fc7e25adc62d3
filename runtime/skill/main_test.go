package skill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	"k8s.io/client-go/rest"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/skill"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/test/controlplane"
)

var (
	// restConfig reaches the real kube-apiserver; nil when it could not start.
	restConfig *rest.Config
	skipReason string
)

func TestMain(m *testing.M) {
	baseline := goleak.IgnoreCurrent()
	code := run(m)
	if code == 0 {
		if err := goleak.Find(append(leakIgnores(), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipReason = reason
		return m.Run()
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}()
	restConfig = env.Config
	return m.Run()
}

// leakIgnores lists process-wide goroutines of client-go, klog and net/http
// that outlive the tests by design.
func leakIgnores() []goleak.Option {
	return controlplane.LeakIgnores(goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
}

// skillMD is a SKILL.md text.
func skillMD(name, desc, body string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\n" + body + "\n"
}

// writeSkill writes dir/name/SKILL.md and extra files (name -> content).
func writeSkill(t testing.TB, dir, name, content string, extra map[string]string) {
	t.Helper()
	g := NewWithT(t)
	folder := filepath.Join(dir, name)
	g.Expect(os.MkdirAll(folder, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(folder, skill.SkillFile), []byte(content), 0o644)).To(Succeed())
	for f, c := range extra {
		g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(folder, f)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(folder, f), []byte(c), 0o644)).To(Succeed())
	}
}

// agent is an Agent named name in namespace ns with skills.
func agent(name, ns string, skills ...picobotv1alpha1.SkillSource) *picobotv1alpha1.Agent {
	a := &picobotv1alpha1.Agent{}
	a.Name, a.Namespace = name, ns
	a.Spec.Skills = skills
	return a
}

// built is a feature built for one agent, with get_skill in a registry.
type built struct {
	parts feature.Parts
	reg   *tool.Registry
}

// build builds f for a with get_skill allowed and closes it at cleanup.
func build(t testing.TB, f *skill.Feature, host *feature.Host, a *picobotv1alpha1.Agent) *built {
	t.Helper()
	g := NewWithT(t)
	if host.Log == nil {
		host.Log = slog.New(slog.DiscardHandler)
	}
	parts, err := f.Build(context.Background(), &feature.Agent{Spec: a, Host: host, Policy: policy.Result{Tools: []string{"get_skill"}}})
	g.Expect(err).NotTo(HaveOccurred())
	if parts.Close != nil {
		t.Cleanup(parts.Close)
	}
	g.Expect(parts.Tools).To(HaveLen(1))
	reg, err := tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	return &built{parts: parts, reg: reg}
}

func (b *built) prompt() string {
	return b.parts.Prompt(context.Background(), session.PromptInput{Text: "hi"})
}

// call runs get_skill with args (a JSON object as a map).
func (b *built) call(t testing.TB, args map[string]any) tool.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b.reg.Execute(context.Background(), tool.Env{}, llm.ToolCall{ID: "1", Name: "get_skill", Arguments: string(raw)})
}

// get returns the content of get_skill get for name, failing on an error.
func (b *built) get(t testing.TB, name string) string {
	t.Helper()
	res := b.call(t, map[string]any{"skill_name": name})
	NewWithT(t).Expect(res.IsError).To(BeFalse(), res.Content)
	return res.Content
}

// failed returns the failed health checks as "name: message".
func (b *built) failed() []string {
	var out []string
	for _, c := range b.parts.Health(context.Background()) {
		if !c.OK {
			out = append(out, c.Name+": "+c.Message)
		}
	}
	return out
}

// summary returns the first health check (the skill count).
func (b *built) summary() gateway.Check {
	return b.parts.Health(context.Background())[0]
}
