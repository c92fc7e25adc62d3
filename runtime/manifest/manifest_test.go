package manifest_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/config/crd"
	"github.com/picobot/picobot/runtime/manifest"
)

const (
	samplesDir = "../../config/samples"
	invalidDir = "../../test/e2e/testdata"
)

// writeDir writes files into a fresh folder and returns it.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// problems splits a joined Load error into its lines.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func TestLoadSamples(t *testing.T) {
	g := NewWithT(t)
	set, err := manifest.Load(samplesDir)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(set.Agents).To(HaveLen(2))
	assistant, researcher := set.Agents[0], set.Agents[1]
	g.Expect(assistant.Name).To(Equal("assistant"))
	g.Expect(assistant.Namespace).To(Equal("default"))
	g.Expect(assistant.APIVersion).To(Equal("agents.picobot.io/v1alpha1"))
	g.Expect(*assistant.Spec.Model.ContextWindow).To(Equal(int32(200000)), "a value in the file wins over the default")
	g.Expect(assistant.Spec.Runtime.IdleTimeout.Duration).To(Equal(15 * time.Minute))
	g.Expect(*assistant.Spec.Memory.Enabled).To(BeTrue(), "memory.enabled defaults to true")
	g.Expect(*assistant.Spec.Browser.Enabled).To(BeTrue(), "browser.enabled defaults to true")
	g.Expect(assistant.Spec.Runtime.Resources.Limits.Memory().String()).To(Equal("512Mi"))
	g.Expect(researcher.Name).To(Equal("researcher"))
	g.Expect(*researcher.Spec.Model.ContextWindow).To(Equal(int32(128000)), "contextWindow defaults when model is set")
	g.Expect(*researcher.Spec.Browser.Enabled).To(BeFalse())

	g.Expect(set.CronJobs).To(HaveLen(2))
	g.Expect(set.CronJobs[0].Name).To(Equal("morning-briefing"))
	g.Expect(set.CronJobs[0].Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryOnAlert))
	g.Expect(set.CronJobs[1].Name).To(Equal("hourly-disk-check"))
	g.Expect(*set.CronJobs[1].Spec.Schedule.Every).To(Equal(int64(3600000)))

	g.Expect(set.BrowserProfiles).To(HaveLen(1))
	g.Expect(set.BrowserProfiles[0].Spec.IdleTimeout.Duration).To(Equal(30 * time.Minute))
	g.Expect(set.Other).To(BeEmpty())
}

func TestLoadAppliesDefaultsWhenOmitted(t *testing.T) {
	g := NewWithT(t)
	set, err := manifest.LoadBytes("defaults.yaml", []byte(`
apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: nightly, namespace: team-a}
spec:
  schedule: {every: 3600000}
  prompt: Check things.
---
apiVersion: agents.picobot.io/v1alpha1
kind: BrowserProfile
metadata: {name: work}
spec: {label: Work}
`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(set.CronJobs[0].Namespace).To(Equal("team-a"), "an explicit namespace is kept")
	g.Expect(set.CronJobs[0].Spec.DeliveryPolicy).To(Equal(picobotv1alpha1.DeliveryAlways))
	g.Expect(set.CronJobs[0].Spec.MissedRunPolicy).To(Equal(picobotv1alpha1.MissedRunOnce))
	g.Expect(set.BrowserProfiles[0].Namespace).To(Equal("default"))
	g.Expect(set.BrowserProfiles[0].Spec.IdleTimeout.Duration).To(Equal(time.Hour))
}

func TestLoadInvalidE2ETestdata(t *testing.T) {
	g := NewWithT(t)
	set, err := manifest.Load(invalidDir)
	g.Expect(set).To(BeNil())
	g.Expect(err).To(HaveOccurred())
	lines := problems(err)
	for _, want := range []string{
		`invalid-agent.yaml:1 Agent/bad-provider: spec.model.provider: Unsupported value: "gemini"`,
		`invalid-agent.yaml:2 Agent/bad-wiring: spec.browser: Invalid value: a browser restricted to allowedDomains cannot use a persistent profile (profileRef)`,
		`invalid-agent.yaml:2 Agent/bad-wiring: spec.mcpServers[0]: Invalid value: stdio servers need command (and no url)`,
		`invalid-browserprofile.yaml:1 BrowserProfile/bad-profile: spec.label: Too long: may not be more than 80`,
		`invalid-cronjob.yaml:1 CronJob/bad-cron: spec.schedule.cron: Invalid value: "0 9 * * *": cron must have exactly 6 fields`,
		`invalid-cronjob.yaml:2 CronJob/bad-tz: spec.schedule: Invalid value: tz applies only to a cron schedule`,
		`invalid-cronjob.yaml:3 CronJob/no-prompt: spec.prompt: Required value`,
	} {
		g.Expect(lines).To(ContainElement(HavePrefix(want)))
	}
	for _, l := range lines {
		g.Expect(l).To(MatchRegexp(`^invalid-\w+\.yaml:\d (Agent|CronJob|BrowserProfile)/[a-z-]+: `), "every problem names its file, document and object")
	}

	var docErr *manifest.DocumentError
	g.Expect(errors.As(err, &docErr)).To(BeTrue())
	var fieldErr *field.Error
	g.Expect(errors.As(docErr, &fieldErr)).To(BeTrue(), "validation problems carry the API server's *field.Error")
	g.Expect(docErr.File).To(Equal("invalid-agent.yaml"))
	g.Expect(docErr.Document).To(Equal(1))
	g.Expect(docErr.Kind).To(Equal("Agent"))
	g.Expect(docErr.Name).To(Equal("bad-provider"))
	g.Expect(fieldErr.Field).To(Equal("spec.model.provider"))
}

func TestLoadBytes(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		check func(g *WithT, set *manifest.Set, err error)
	}{
		{"multi-document file with comments and empty documents", `# leading comment
---
---
# a document with only a comment
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: one # trailing comment
spec: {}
---

---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: two
spec: {}
...
`, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.Agents).To(HaveLen(2))
			g.Expect(set.Agents[0].Name).To(Equal("one"))
			g.Expect(set.Agents[1].Name).To(Equal("two"))
		}},
		{"document numbers count comment-only documents", `# header
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: ok}
spec: {}
---
apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: bad}
spec:
  schedule: {cron: "0 9 * * *"}
  prompt: x
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(HavePrefix(`f.yaml:3 CronJob/bad: spec.schedule.cron: Invalid value: "0 9 * * *": cron must have exactly 6 fields`)))
		}},
		//nolint:misspell // "modle" is the typo under test.
		{"unknown field", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: typo, lables: {a: b}}
spec:
  modle: {provider: openai, model: gpt-5.2}
  tools: {profile: coding, alow: [x]}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ConsistOf(
				`f.yaml:1 Agent/typo: unknown field "metadata.lables"`,
				`f.yaml:1 Agent/typo: unknown field "spec.modle"`,
				`f.yaml:1 Agent/typo: unknown field "spec.tools.alow"`,
			))
		}},
		{"unknown field and invalid value are both reported", `apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: both}
spec:
  schedule: {every: 1000}
  promt: x
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ContainElements(
				`f.yaml:1 CronJob/both: unknown field "spec.promt"`,
				`f.yaml:1 CronJob/both: spec.prompt: Required value`,
			))
		}},
		{"key given twice", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: twice}
spec:
  instructions: a
  instructions: b
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(SatisfyAll(HavePrefix("f.yaml:1: failed to parse YAML"), ContainSubstring(`"instructions" already set`))))
		}},
		{"value of the wrong type", `apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: typed}
spec:
  schedule: {every: "an hour"}
  prompt: x
  target: {channel: telegram, chatID: -1001234567890}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ContainElements(
				HavePrefix(`f.yaml:1 CronJob/typed: spec.schedule.every: Invalid value: "string": spec.schedule.every in body must be of type integer`),
				HavePrefix(`f.yaml:1 CronJob/typed: spec.target.chatID: Invalid value: "integer": spec.target.chatID in body must be of type string`),
			))
		}},
		{"unknown kind in the PicoBot group", `apiVersion: agents.picobot.io/v1alpha1
kind: Agnet
metadata: {name: x}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(`f.yaml:1 Agnet/x: unsupported kind "Agnet" in apiVersion "agents.picobot.io/v1alpha1"; supported: agents.picobot.io/v1alpha1 Agent, agents.picobot.io/v1alpha1 BrowserProfile, agents.picobot.io/v1alpha1 CronJob, agents.picobot.io/v1alpha1 TenantQuota`))
		}},
		{"unknown version", `apiVersion: agents.picobot.io/v1beta1
kind: Agent
metadata: {name: x}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(ContainSubstring(`f.yaml:1 Agent/x: unsupported kind "Agent" in apiVersion "agents.picobot.io/v1beta1"; supported: agents.picobot.io/v1alpha1 Agent`)))
		}},
		{"misspelt PicoBot group", `apiVersion: agent.picobot.io/v1alpha1
kind: Agent
metadata: {name: x}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(ContainSubstring(`f.yaml:1 Agent/x: unsupported kind "Agent" in apiVersion "agent.picobot.io/v1alpha1"`)))
		}},
		{"missing kind", `apiVersion: agents.picobot.io/v1alpha1
metadata: {name: x}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(HavePrefix("f.yaml:1: apiVersion and kind are required")))
		}},
		{"not an object", "- a\n- b\n", func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(HavePrefix("f.yaml:1: not a Kubernetes object")))
		}},
		{"missing name", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
spec: {}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ContainElement("f.yaml:1 Agent: metadata.name: Required value: name or generateName is required"))
		}},
		{"invalid name and namespace", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: My_Agent, namespace: Team A}
spec: {}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ContainElements(
				HavePrefix(`f.yaml:1 Agent/My_Agent: metadata.name: Invalid value: "My_Agent"`),
				HavePrefix(`f.yaml:1 Agent/My_Agent: metadata.namespace: Invalid value: "Team A"`),
			))
		}},
		{"duplicate list-map key", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: dup}
spec:
  skills: [{name: a, content: one}, {name: a, content: two}]
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(ContainSubstring(`f.yaml:1 Agent/dup: spec.skills[1]: Duplicate value: {"name":"a"}`)))
		}},
		{"duration the Go type cannot parse", `apiVersion: agents.picobot.io/v1alpha1
kind: BrowserProfile
metadata: {name: soon}
spec: {idleTimeout: soon}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(`f.yaml:1 BrowserProfile/soon: spec.idleTimeout: Invalid value: "soon": idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h`))
		}},
		{"tenant quota", `apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: default, namespace: team-a}
spec:
  budget: {dayTokens: 1000, dayCost: "2.50"}
  maxCronJobs: 3
`, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.TenantQuotas).To(HaveLen(1))
			q := set.TenantQuotas[0]
			g.Expect(q.Namespace).To(Equal("team-a"))
			g.Expect(*q.Spec.Budget.DayTokens).To(Equal(int64(1000)))
			g.Expect(*q.Spec.Budget.SoftLimitPercent).To(Equal(int32(80)), "defaulted as by the API server")
			g.Expect(*q.Spec.MaxCronJobs).To(Equal(int32(3)))
		}},
		{"tenant quota of another name and a bad cost", `apiVersion: agents.picobot.io/v1alpha1
kind: TenantQuota
metadata: {name: team-quota}
spec:
  budget: {monthCost: "12,50"}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ConsistOf(
				`f.yaml:1 TenantQuota/team-quota: <nil>: Invalid value: a TenantQuota must be named default: a namespace has one quota`,
				`f.yaml:1 TenantQuota/team-quota: spec.budget.monthCost: Invalid value: "12,50": monthCost must be a positive decimal such as 300 or 12.50 (at most 6 decimals)`,
			))
		}},
		{"status is ignored as on a create", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: s}
spec: {}
status: {activeSessions: 3}
`, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.Agents[0].Status.ActiveSessions).To(BeZero())
		}},
		{"Secret passed through", `apiVersion: v1
kind: Secret
metadata: {name: model-api-keys}
stringData: {openai: sk-test}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: skills, namespace: team-a}
data: {SKILL.md: hello}
`, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.Other).To(HaveLen(2))
			secret := set.Other[0]
			g.Expect(secret.GetKind()).To(Equal("Secret"))
			g.Expect(secret.GetName()).To(Equal("model-api-keys"))
			g.Expect(secret.GetNamespace()).To(Equal("default"))
			g.Expect(secret.Object["stringData"]).To(HaveKeyWithValue("openai", "sk-test"))
			g.Expect(set.Other[1].GetNamespace()).To(Equal("team-a"))
		}},
		{"other object without a name", "apiVersion: v1\nkind: Secret\n", func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError("f.yaml:1 Secret: metadata.name: Required value"))
		}},
		{"v1 List is expanded", `apiVersion: v1
kind: List
items:
- apiVersion: agents.picobot.io/v1alpha1
  kind: Agent
  metadata: {name: listed}
  spec: {}
- apiVersion: v1
  kind: Secret
  metadata: {name: s}
`, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.Agents).To(HaveLen(1))
			g.Expect(set.Other).To(HaveLen(1))
		}},
		{"same name twice in one file", `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: a}
spec: {}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: a, namespace: default}
spec: {}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata: {name: a, namespace: other}
spec: {}
---
apiVersion: agents.picobot.io/v1alpha1
kind: BrowserProfile
metadata: {name: a}
spec: {}
`, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(`f.yaml:2 Agent/a: Agent "a" in namespace "default" is already defined at f.yaml:1`))
		}},
		{"empty input", "", func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(*set).To(BeZero())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := manifest.LoadBytes("f.yaml", []byte(tc.yaml))
			tc.check(NewWithT(t), set, err)
		})
	}
}

func TestLoadFolder(t *testing.T) {
	const agentA = "apiVersion: agents.picobot.io/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {}\n"
	cases := []struct {
		name  string
		files map[string]string
		check func(g *WithT, set *manifest.Set, err error)
	}{
		{"reads .yaml and .yml, not other files or subfolders", map[string]string{
			"a.yaml":         agentA,
			"b.yml":          "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
			"README.md":      "not yaml",
			"c.json":         "{}",
			"sub/d.yaml":     "apiVersion: agents.picobot.io/v1alpha1\nkind: Agent\nmetadata: {name: nested}\nspec: {}\n",
			"dir.yaml/e.yml": "not: read",
		}, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.Agents).To(HaveLen(1))
			g.Expect(set.Other).To(HaveLen(1))
		}},
		{"duplicate names across files", map[string]string{
			"a.yaml": agentA,
			"b.yaml": "# again\n---\n" + agentA,
		}, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(err).To(MatchError(`b.yaml:2 Agent/a: Agent "a" in namespace "default" is already defined at a.yaml:1`))
		}},
		{"every problem of every file in one error", map[string]string{
			//nolint:misspell // "modle" is the typo under test.
			"a.yaml": "apiVersion: agents.picobot.io/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {modle: x}\n",
			"b.yaml": "apiVersion: agents.picobot.io/v1alpha1\nkind: Thing\nmetadata: {name: b}\n",
			"c.yaml": "apiVersion: agents.picobot.io/v1alpha1\nkind: CronJob\nmetadata: {name: c}\nspec: {schedule: {every: 5}, prompt: x}\n",
		}, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ConsistOf(
				`a.yaml:1 Agent/a: unknown field "spec.modle"`,
				HavePrefix(`b.yaml:1 Thing/b: unsupported kind "Thing"`),
				`c.yaml:1 CronJob/c: spec.schedule.every: Invalid value: 5: every must be at least 60000 ms (one minute)`,
			))
		}},
		{"another tool's YAML is skipped, hidden files are not read", map[string]string{
			"a.yaml":        agentA,
			"mkdocs.yml":    "site_name: Docs\nnav:\n  - Home: index.md\n",
			"compose.yaml":  "services:\n  web: {image: nginx}\n---\nvolumes: {}\n",
			".golangci.yml": "version: \"2\"\nlinters: {default: none}\n",
			".broken.yaml":  "{{ not yaml",
		}, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(set.Agents).To(HaveLen(1))
			g.Expect(set.Skipped).To(ConsistOf("compose.yaml", "mkdocs.yml"))
		}},
		{"a document without apiVersion and kind among objects is still an error", map[string]string{
			"a.yaml": agentA + "---\nmetadata: {name: forgot}\nspec: {}\n",
		}, func(g *WithT, _ *manifest.Set, err error) {
			g.Expect(problems(err)).To(ConsistOf(HavePrefix("a.yaml:2: apiVersion and kind are required")))
		}},
		{"empty folder", map[string]string{}, func(g *WithT, set *manifest.Set, err error) {
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(*set).To(BeZero())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := manifest.Load(writeDir(t, tc.files))
			tc.check(NewWithT(t), set, err)
		})
	}
}

func TestLoadMissingFolder(t *testing.T) {
	g := NewWithT(t)
	_, err := manifest.Load(filepath.Join(t.TempDir(), "nope"))
	g.Expect(err).To(MatchError(ContainSubstring("failed to read manifest folder")))
}

func TestNewLoaderRejectsBadCRDs(t *testing.T) {
	g := NewWithT(t)
	_, err := manifest.NewLoader(os.DirFS(t.TempDir()))
	g.Expect(err).To(MatchError(ContainSubstring("no CustomResourceDefinition found")))
}

// TestValidateUpdate mirrors TestPersistenceImmutable in api/v1alpha1: the
// transition rules that Load cannot run (there is no old object) run here.
func TestValidateUpdate(t *testing.T) {
	l, err := manifest.NewLoader(crd.FS)
	if err != nil {
		t.Fatal(err)
	}
	profileWith := func(p *picobotv1alpha1.Persistence, label string) *picobotv1alpha1.BrowserProfile {
		return &picobotv1alpha1.BrowserProfile{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bp"},
			Spec:       picobotv1alpha1.BrowserProfileSpec{Label: label, Persistence: p},
		}
	}
	cases := []struct {
		name   string
		create *picobotv1alpha1.Persistence
		update *picobotv1alpha1.Persistence
		reject string
	}{
		{"change storage", &picobotv1alpha1.Persistence{Storage: "s3"}, &picobotv1alpha1.Persistence{Storage: "pvc"},
			"spec.persistence: Invalid value: persistence is immutable; create a new BrowserProfile instead"},
		{"add after creation", nil, &picobotv1alpha1.Persistence{Storage: "pvc"}, "persistence is immutable"},
		{"remove after creation", &picobotv1alpha1.Persistence{Storage: "pvc"}, nil, "persistence is immutable"},
		{"unchanged", &picobotv1alpha1.Persistence{Storage: "pvc"}, &picobotv1alpha1.Persistence{Storage: "pvc"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			old := profileWith(tc.create, "Work account")
			g.Expect(l.Validate(nil, old)).To(Succeed())
			err := l.Validate(old, profileWith(tc.update, "renamed"))
			if tc.reject == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue())
			g.Expect(err).To(MatchError(ContainSubstring(tc.reject)))
		})
	}
}

func TestValidate(t *testing.T) {
	l, err := manifest.NewLoader(crd.FS)
	if err != nil {
		t.Fatal(err)
	}
	cron := func(expr string) *picobotv1alpha1.CronJob {
		return &picobotv1alpha1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"},
			Spec: picobotv1alpha1.CronJobSpec{
				Schedule: picobotv1alpha1.Schedule{Cron: expr},
				Prompt:   "x",
				// CatchUpWindow needs the defaulted missedRunPolicy to be
				// checked, which Validate applies to a copy.
				CatchUpWindow: picobotv1alpha1.NewDuration(time.Hour),
			},
		}
	}
	size := resource.MustParse("1Gi")
	cases := []struct {
		name   string
		old    func() *picobotv1alpha1.CronJob
		obj    *picobotv1alpha1.CronJob
		reject []string
	}{
		{"create", nil, cron("0 9 * * *"), []string{
			`CronJob.agents.picobot.io "c" is invalid`,
			`spec.schedule.cron: Invalid value: "0 9 * * *": cron must have exactly 6 fields`,
			"spec: Invalid value: catchUpWindow applies only with missedRunPolicy catch_up",
		}},
		{"update ratchets an unchanged invalid field", func() *picobotv1alpha1.CronJob { return cron("0 9 * * *") }, func() *picobotv1alpha1.CronJob {
			c := cron("0 9 * * *")
			c.Spec.MissedRunPolicy = picobotv1alpha1.MissedCatchUp
			return c
		}(), nil},
		{"update reports a changed invalid field", func() *picobotv1alpha1.CronJob { return cron("0 0 9 * * *") }, cron("0 9 * * *"), []string{
			"spec.schedule.cron: Invalid value",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var err error
			if tc.old == nil {
				err = l.Validate(nil, tc.obj)
			} else {
				err = l.Validate(tc.old(), tc.obj)
			}
			if tc.reject == nil {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue())
			for _, r := range tc.reject {
				g.Expect(err).To(MatchError(ContainSubstring(r)))
			}
			g.Expect(tc.obj.Spec.MissedRunPolicy).NotTo(Equal(picobotv1alpha1.MissedRunOnce), "Validate does not default its argument")
		})
	}

	g := NewWithT(t)
	p := &picobotv1alpha1.BrowserProfile{ObjectMeta: metav1.ObjectMeta{Name: "bp"},
		Spec: picobotv1alpha1.BrowserProfileSpec{Persistence: &picobotv1alpha1.Persistence{Storage: "s3", Size: &size}}}
	g.Expect(l.Validate(nil, p)).To(MatchError(ContainSubstring("spec.persistence: Invalid value: size and storageClassName apply only to storage pvc")))
}

// BenchmarkLoadSamples measures a cold start of embedded mode's folder load
// (the Loader, with its compiled CEL rules, is built once per process).
func BenchmarkLoadSamples(b *testing.B) {
	if _, err := manifest.Load(samplesDir); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := manifest.Load(samplesDir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewLoader measures the one-time cost Load pays on first use:
// converting the embedded CRDs and compiling their CEL rules.
func BenchmarkNewLoader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := manifest.NewLoader(crd.FS); err != nil {
			b.Fatal(err)
		}
	}
}
