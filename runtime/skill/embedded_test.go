package skill_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/embedded"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/skill"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/policy"
)

const configMapsYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  name: team-skills
  labels:
    skills.picobot.io/shared: "true"
data:
  SKILL.md: |
    ---
    name: team-style
    description: Team writing style (shared ConfigMap).
    ---
    Write short sentences.
  glossary.md: "PR: pull request"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: agent-skills
data:
  release.md: |
    ---
    name: release
    description: Release checklist (agent ConfigMap).
    ---
    Tag, build, announce.
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: other-namespace
  namespace: elsewhere
  labels:
    skills.picobot.io/shared: "true"
data:
  SKILL.md: |
    ---
    name: elsewhere
    description: Not for agents of the default namespace.
    ---
    Never listed.
`

// embeddedEnv is a manifests folder and a home folder for embedded mode.
type embeddedEnv struct {
	home, manifests string
	feature         *skill.Feature
}

func newEmbeddedEnv(t *testing.T, manifests string) *embeddedEnv {
	t.Helper()
	e := &embeddedEnv{home: t.TempDir(), manifests: t.TempDir()}
	if manifests != "" {
		NewWithT(t).Expect(os.WriteFile(filepath.Join(e.manifests, "configmaps.yaml"), []byte(manifests), 0o600)).To(Succeed())
	}
	e.feature = skill.NewFeature(skill.Options{ManifestsDir: e.manifests, Home: e.home})
	return e
}

func (e *embeddedEnv) agentDir() string   { return filepath.Join(e.manifests, "skills") }
func (e *embeddedEnv) picobotDir() string { return filepath.Join(e.home, ".picobot", "skills") }
func (e *embeddedEnv) userDir() string    { return filepath.Join(e.home, ".agents", "skills") }

func (e *embeddedEnv) build(t *testing.T, a *picobotv1alpha1.Agent) *built {
	t.Helper()
	if a.Namespace == "" {
		a.Namespace = "default"
	}
	return build(t, e.feature, &feature.Host{Mode: feature.ModeEmbedded, Tenant: "default"}, a)
}

func TestEmbeddedLevels(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, configMapsYAML)
	// Lowest level first: each higher one overrides web-research.
	writeSkill(t, e.userDir(), "web-research", skillMD("web-research", "User copy.", "user body"), nil)
	writeSkill(t, e.userDir(), "only-user", skillMD("only-user", "Only in ~/.agents.", "u"), nil)
	writeSkill(t, e.picobotDir(), "pico", skillMD("pico", "In ~/.picobot.", "p"), nil)
	// A user's broken edit of a built-in is kept, reported, and the built-in
	// still serves.
	writeSkill(t, e.picobotDir(), "browser-automation", "I removed the frontmatter", nil)
	writeSkill(t, e.agentDir(), "web-research", skillMD("web-research", "Agent folder copy.", "agent body"), nil)
	writeSkill(t, e.agentDir(), "dup", skillMD("dup", "Folder dup.", "folder"), nil)
	writeSkill(t, e.agentDir(), "broken", "no frontmatter here", nil)
	writeSkill(t, e.agentDir(), "Bad_Name", skillMD("bad-name", "d", "b"), nil)
	writeSkill(t, e.agentDir(), "mismatch", skillMD("other", "d", "b"), nil)
	g.Expect(os.WriteFile(filepath.Join(e.agentDir(), "README.md"), []byte("not a skill"), 0o644)).To(Succeed())

	b := e.build(t, agent("assistant", "",
		picobotv1alpha1.SkillSource{Name: "inline", Content: skillMD("inline", "Inline in the Agent.", "inline body")},
		picobotv1alpha1.SkillSource{Name: "dup", Content: skillMD("dup", "Inline dup.", "inline")},
		picobotv1alpha1.SkillSource{Name: "release", ConfigMapRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "agent-skills"}, Key: "release.md"}},
	))

	g.Expect(b.prompt()).To(Equal(`## Skills
Skills are instructions for particular tasks. When a task matches a skill below, load it with get_skill (skill_name) first and follow it.
- browser-automation: ` + builtinDescription(t, "browser-automation") + `
- dup: Inline dup.
- inline: Inline in the Agent.
- only-user: Only in ~/.agents.
- pico: In ~/.picobot.
- release: Release checklist (agent ConfigMap).
- scheduled-tasks: ` + builtinDescription(t, "scheduled-tasks") + `
- skill-creator: ` + builtinDescription(t, "skill-creator") + `
- team-style: Team writing style (shared ConfigMap).
- web-research: Agent folder copy.`))

	list := b.call(t, map[string]any{"action": "list"})
	g.Expect(list.IsError).To(BeFalse())
	// The unchanged installed copy of a built-in counts as the built-in.
	g.Expect(list.Content).To(ContainSubstring("\n- web-research [agent, overrides built-in, user]: Agent folder copy."))
	g.Expect(list.Content).To(ContainSubstring("\n- browser-automation [built-in]: "))
	g.Expect(list.Content).To(ContainSubstring("\n- skill-creator [built-in]: "))
	g.Expect(list.Content).To(ContainSubstring("\n- pico [shared]: "))
	g.Expect(list.Content).To(ContainSubstring("\n- only-user [user]: "))

	g.Expect(b.get(t, "web-research")).To(HaveSuffix("\n\nagent body"))
	g.Expect(b.get(t, "release")).To(Equal("Skill release [agent]: Release checklist (agent ConfigMap).\n\nTag, build, announce."))
	g.Expect(b.get(t, "team-style")).To(Equal("Skill team-style [shared]: Team writing style (shared ConfigMap).\n" +
		"Files (read one with get_skill file=<name>): glossary.md\n\nWrite short sentences."))
	g.Expect(b.call(t, map[string]any{"skill_name": "team-style", "file": "glossary.md"}).Content).To(HaveSuffix("PR: pull request"))

	res := b.call(t, map[string]any{"skill_name": "broken"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("skill broken is broken and cannot be loaded (missing frontmatter"))

	g.Expect(b.summary().Message).To(Equal("10 skills (4 agent, 2 shared, 3 built-in, 1 user)"))
	g.Expect(b.failed()).To(ConsistOf(
		ContainSubstring(filepath.Join(e.agentDir(), "Bad_Name", "SKILL.md")+": folder name: \"Bad_Name\" is not a valid skill name"),
		ContainSubstring(filepath.Join(e.agentDir(), "broken", "SKILL.md")+": missing frontmatter"),
		ContainSubstring(filepath.Join(e.agentDir(), "mismatch", "SKILL.md")+": frontmatter name \"other\" does not match the skill's name \"mismatch\""),
		ContainSubstring(filepath.Join(e.agentDir(), "dup", "SKILL.md")+": duplicate agent skill dup: spec.skills[1] (dup) is used instead"),
		ContainSubstring(filepath.Join(e.picobotDir(), "browser-automation", "SKILL.md")+": missing frontmatter"),
	))

	// Built-ins were installed, except over the user's own folder.
	for _, name := range skill.Builtins() {
		g.Expect(filepath.Join(e.picobotDir(), name, skill.SkillFile)).To(BeAnExistingFile())
	}
	data, err := os.ReadFile(filepath.Join(e.picobotDir(), "browser-automation", skill.SkillFile))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("I removed the frontmatter"))
}

// builtinDescription reads a built-in skill's description through a
// catalog that has nothing else.
func builtinDescription(t *testing.T, name string) string {
	t.Helper()
	e := newEmbeddedEnv(t, "")
	b := e.build(t, agent("probe", ""))
	for _, line := range strings.Split(b.prompt(), "\n") {
		if d, ok := strings.CutPrefix(line, "- "+name+": "); ok {
			return d
		}
	}
	t.Fatalf("no built-in skill %s", name)
	return ""
}

func TestBuiltins(t *testing.T) {
	g := NewWithT(t)
	names := skill.Builtins()
	g.Expect(names).To(Equal([]string{"browser-automation", "scheduled-tasks", "skill-creator", "web-research"}))

	// In cluster mode (no folders) they are served from the binary.
	b := build(t, skill.NewFeature(skill.Options{}), &feature.Host{Mode: feature.ModeCluster, Tenant: "t"}, agent("a", "t"))
	g.Expect(b.summary().Message).To(Equal("4 skills (4 built-in)"))
	for _, n := range names {
		body := b.get(t, n)
		g.Expect(body).To(HavePrefix("Skill " + n + " [built-in]: "))
		g.Expect(len(body)).To(BeNumerically("<", 4096), "built-in skills stay short")
	}
	// Cluster mode without a client reports why ConfigMap skills are missing.
	g.Expect(b.failed()).To(ConsistOf(ContainSubstring("no Kubernetes client")))
}

func TestInstallBuiltins(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "skills")
	installed, err := skill.InstallBuiltins(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(installed).To(Equal(skill.Builtins()))

	edited := filepath.Join(dir, "web-research", skill.SkillFile)
	g.Expect(os.WriteFile(edited, []byte(skillMD("web-research", "Mine.", "my edit")), 0o644)).To(Succeed())
	g.Expect(os.RemoveAll(filepath.Join(dir, "skill-creator"))).To(Succeed())

	installed, err = skill.InstallBuiltins(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(installed).To(Equal([]string{"skill-creator"}), "only the deleted one comes back")
	data, err := os.ReadFile(edited)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring("my edit"))

	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(len(skill.Builtins())), "no temporary folders are left behind")

	// A folder that cannot be created is an error, not a crash.
	file := filepath.Join(t.TempDir(), "file")
	g.Expect(os.WriteFile(file, nil, 0o600)).To(Succeed())
	_, err = skill.InstallBuiltins(filepath.Join(file, "skills"))
	g.Expect(err).To(MatchError(ContainSubstring("failed to create skills folder")))
}

func TestFolderChangesApplyNextTurn(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, "")
	writeSkill(t, e.agentDir(), "notes", skillMD("notes", "Version one.", "v1"), nil)
	b := e.build(t, agent("assistant", ""))
	g.Expect(b.prompt()).To(ContainSubstring("- notes: Version one."))

	file := filepath.Join(e.agentDir(), "notes", skill.SkillFile)
	g.Expect(os.WriteFile(file, []byte(skillMD("notes", "Version two.", "v2")), 0o644)).To(Succeed())
	later := time.Now().Add(time.Minute) // a different modification time even on coarse clocks
	g.Expect(os.Chtimes(file, later, later)).To(Succeed())
	g.Expect(b.prompt()).To(ContainSubstring("- notes: Version two."))
	g.Expect(b.get(t, "notes")).To(HaveSuffix("v2"))

	writeSkill(t, e.userDir(), "added", skillMD("added", "Added later.", "new"), nil)
	g.Expect(b.prompt()).To(ContainSubstring("- added: Added later."))

	g.Expect(os.WriteFile(file, []byte("broken now"), 0o644)).To(Succeed())
	g.Expect(b.prompt()).NotTo(ContainSubstring("- notes:"))
	g.Expect(b.failed()).To(ConsistOf(ContainSubstring("notes/SKILL.md: missing frontmatter")))

	g.Expect(os.RemoveAll(filepath.Join(e.agentDir(), "notes"))).To(Succeed())
	g.Expect(b.failed()).To(BeEmpty(), "a removed skill's problem goes away")
	res := b.call(t, map[string]any{"skill_name": "notes"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(HavePrefix("error: no skill named notes; available: added, browser-automation, "))
}

func TestSkillFiles(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, "")
	outside := filepath.Join(t.TempDir(), "secret.txt")
	g.Expect(os.WriteFile(outside, []byte("top secret"), 0o600)).To(Succeed())
	writeSkill(t, e.agentDir(), "tools", skillMD("tools", "With files.", "See ref.md."), map[string]string{
		"ref.md":          "reference",
		"scripts/run.sh":  "echo hi",
		".hidden":         "x",
		"big.txt":         strings.Repeat("x", skill.MaxFileBytes+1),
		"image.png":       "\x89PNG\x00\xff",
		"a/b/c/d/deep.md": "too deep to list",
	})
	folder := filepath.Join(e.agentDir(), "tools")
	g.Expect(os.Symlink(outside, filepath.Join(folder, "escape.txt"))).To(Succeed())
	// A skill folder linked into ~/.agents/skills is followed.
	shared := filepath.Join(t.TempDir(), "linked")
	writeSkill(t, filepath.Dir(shared), "linked", skillMD("linked", "Linked folder.", "linked body"), nil)
	g.Expect(os.MkdirAll(e.userDir(), 0o755)).To(Succeed())
	g.Expect(os.Symlink(shared, filepath.Join(e.userDir(), "linked"))).To(Succeed())

	b := e.build(t, agent("assistant", ""))
	g.Expect(b.get(t, "tools")).To(Equal("Skill tools [agent]: With files.\nFolder: " + folder +
		"\nFiles (read one with get_skill file=<name>): big.txt, image.png, ref.md, scripts/run.sh\n\nSee ref.md."))
	g.Expect(b.get(t, "linked")).To(HaveSuffix("linked body"))

	cases := []struct{ file, want string }{
		{"scripts/run.sh", "File scripts/run.sh of skill tools:\n\necho hi"},
		{"../tools/ref.md", `error: file "../tools/ref.md" must be a relative path inside the skill folder`},
		{"/etc/passwd", `error: file "/etc/passwd" must be a relative path inside the skill folder`},
		{"scripts/../../../x", `must be a relative path inside the skill folder`},
		{`scripts\run.sh`, `must be a relative path inside the skill folder`},
		{"escape.txt", `error: failed to read file "escape.txt" of skill tools`},
		{"missing.md", "error: skill tools has no file \"missing.md\"; its files: big.txt, image.png, ref.md, scripts/run.sh"},
		{"scripts", "error: skill tools has no file \"scripts\""},
		{"big.txt", "get_skill returns files up to 256 KiB: read it in parts with file_read from " + filepath.Join(folder, "big.txt")},
		{"image.png", `error: file "image.png" of skill tools is not text`},
	}
	for _, tc := range cases {
		res := b.call(t, map[string]any{"skill_name": "tools", "file": tc.file})
		g.Expect(res.Content).To(ContainSubstring(tc.want), tc.file)
		g.Expect(res.IsError).To(Equal(strings.HasPrefix(tc.want, "error") || strings.Contains(tc.want, "must") || tc.file == "big.txt"), tc.file)
		g.Expect(res.Content).NotTo(ContainSubstring("top secret"))
	}
	res := b.call(t, map[string]any{"skill_name": "linked", "file": "x.md"})
	g.Expect(res.Content).To(Equal(`error: skill linked has no file "x.md"; its files: none`))
}

func TestBadInput(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, configMapsYAML)
	writeSkill(t, e.agentDir(), "huge", skillMD("huge", "Too big.", strings.Repeat("x", 2*skill.MaxSkillBytes)), nil)
	g.Expect(os.MkdirAll(filepath.Join(e.agentDir(), "empty"), 0o755)).To(Succeed())
	optional := true
	ref := func(name, key string) *corev1.ConfigMapKeySelector {
		return &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	b := e.build(t, agent("assistant", "",
		picobotv1alpha1.SkillSource{Name: "bad-inline", Content: "---\nname: bad-inline\n---\nbody"},
		picobotv1alpha1.SkillSource{Name: "missing-cm", ConfigMapRef: ref("nope", "SKILL.md")},
		picobotv1alpha1.SkillSource{Name: "missing-key", ConfigMapRef: ref("agent-skills", "other.md")},
		picobotv1alpha1.SkillSource{Name: "optional", ConfigMapRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "SKILL.md", Optional: &optional}},
		picobotv1alpha1.SkillSource{Name: "traversal", ConfigMapRef: ref("../../etc", "passwd")},
		picobotv1alpha1.SkillSource{Name: "key-traversal", ConfigMapRef: ref("agent-skills", "../release.md")},
		picobotv1alpha1.SkillSource{Name: "../up", Content: skillMD("up", "d", "b")},
		picobotv1alpha1.SkillSource{Name: "both", Content: skillMD("both", "d", "b"), ConfigMapRef: ref("agent-skills", "release.md")},
		picobotv1alpha1.SkillSource{Name: "neither"},
		picobotv1alpha1.SkillSource{Name: "wrong-name", ConfigMapRef: ref("agent-skills", "release.md")},
	))
	g.Expect(b.failed()).To(ConsistOf(
		ContainSubstring("huge/SKILL.md: SKILL.md is 524"),
		ContainSubstring("empty/SKILL.md: the folder has no SKILL.md"),
		ContainSubstring("spec.skills[0] (bad-inline): frontmatter has no description"),
		ContainSubstring("spec.skills[1] (missing-cm): ConfigMap nope key SKILL.md: ConfigMap nope does not exist in the manifests folder"),
		ContainSubstring("spec.skills[2] (missing-key): ConfigMap agent-skills key other.md: ConfigMap agent-skills has no key other.md (keys: release.md)"),
		ContainSubstring("spec.skills[4] (traversal): configMapRef name \"../../etc\" is not a valid ConfigMap name"),
		ContainSubstring("spec.skills[5] (key-traversal): configMapRef key \"../release.md\" is not a valid ConfigMap key"),
		ContainSubstring("spec.skills[6] (../up): \"../up\" is not a valid skill name"),
		ContainSubstring("spec.skills[7] (both): skill both has both content and configMapRef"),
		ContainSubstring("spec.skills[8] (neither): skill neither has neither content nor configMapRef"),
		ContainSubstring("spec.skills[9] (wrong-name): ConfigMap agent-skills key release.md: frontmatter name \"release\" does not match the skill's name \"wrong-name\""),
	))
	g.Expect(b.prompt()).NotTo(ContainSubstring("huge"))

	for _, name := range []string{"../../etc/passwd", "a/b", "UPPER", strings.Repeat("a", 64)} {
		res := b.call(t, map[string]any{"skill_name": name})
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(res.Content).To(ContainSubstring("is not a valid skill name"), name)
		g.Expect(res.Content).To(HaveSuffix("use action list to see the skills"))
	}
}

func TestManySkillsKeepThePromptBounded(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, "")
	long := strings.Repeat("word ", 150)
	for i := range 300 {
		name := fmt.Sprintf("skill-%03d", i)
		writeSkill(t, e.userDir(), name, skillMD(name, long, "b"), nil)
	}
	b := e.build(t, agent("assistant", ""))
	p := b.prompt()
	g.Expect(len(p)).To(BeNumerically("<", 8<<10))
	g.Expect(p).To(ContainSubstring("- browser-automation: "))
	g.Expect(p).To(ContainSubstring("word word…\n"), "long descriptions are shortened")
	g.Expect(p).To(MatchRegexp(`More skills \(get_skill action list describes them\): skill-\d{3}, `))
	g.Expect(b.summary().Message).To(Equal("260 skills (4 built-in, 256 user)"))
	g.Expect(b.failed()).To(ConsistOf(ContainSubstring("more than 256 skills; the rest are ignored")))
}

func TestGetSkillNotAllowed(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, "")
	parts, err := e.feature.Build(context.Background(), &feature.Agent{Spec: agent("a", "default"),
		Host: &feature.Host{Mode: feature.ModeEmbedded}, Policy: policy.Result{Tools: []string{"calculator"}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parts.Tools).To(BeEmpty())
	g.Expect(parts.Prompt).To(BeNil())
	g.Expect(parts.Health(context.Background())).To(Equal([]gateway.Check{{Name: "agent a skills", OK: true,
		Message: "get_skill is not in the agent's tool set, so no skills are offered"}}))
	g.Expect(e.picobotDir()).NotTo(BeADirectory(), "nothing is installed for an agent without skills")
}

const e2eAgentYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  instructions: You are a test assistant.
  model:
    provider: openai
    model: test-model
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["get_skill"]
  skills:
  - name: greeting
    content: |
      ---
      name: greeting
      description: How to greet the user.
      ---
      Greet in Esperanto.
---
apiVersion: v1
kind: Secret
metadata:
  name: llm
stringData:
  apiKey: sk-test
`

// TestEmbeddedAgent runs a real embedded PicoBot with the feature: the model
// (scripted) sees the skills in its system prompt and loads one.
func TestEmbeddedAgent(t *testing.T) {
	g := NewWithT(t)
	llmServer := fakellm.New()
	t.Cleanup(llmServer.Close)
	e := newEmbeddedEnv(t, "")
	g.Expect(os.WriteFile(filepath.Join(e.manifests, "agent.yaml"), fmt.Appendf(nil, e2eAgentYAML, llmServer.URL()), 0o600)).To(Succeed())
	rt, err := embedded.Open(context.Background(), embedded.Options{Dir: e.manifests, StateDir: t.TempDir(),
		Env: func(string) string { return "" }, Features: []feature.Feature{e.feature}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(rt.Close)

	llmServer.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "get_skill", Args: `{"skill_name":"greeting"}`}}},
		fakellm.Turn{Text: "Saluton!"},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard only
	defer cancel()
	out, err := rt.Handle(store.WithTenant(ctx, manifest.DefaultNamespace), gateway.Send{ID: "m1", Agent: "assistant", ChatID: "c", Text: "hello"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(Equal("Saluton!"))

	reqs := llmServer.Requests()
	g.Expect(reqs).To(HaveLen(2))
	g.Expect(reqs[0].Tools).To(Equal([]string{"get_skill"}))
	g.Expect(reqs[0].System).To(HavePrefix("You are a test assistant.\n\n## Skills\n"))
	g.Expect(reqs[0].System).To(ContainSubstring("\n- greeting: How to greet the user.\n"))
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	g.Expect(last.ToolResults).To(HaveLen(1))
	g.Expect(last.ToolResults[0].IsError).To(BeFalse())
	g.Expect(last.ToolResults[0].Content).To(Equal("Skill greeting [agent]: How to greet the user.\n\nGreet in Esperanto."))
}

// TestConcurrentTurns runs prompts and get_skill calls of many sessions while
// a skill is being edited; run with -race.
func TestConcurrentTurns(t *testing.T) {
	g := NewWithT(t)
	e := newEmbeddedEnv(t, "")
	file := filepath.Join(e.agentDir(), "notes", skill.SkillFile)
	writeSkill(t, e.agentDir(), "notes", skillMD("notes", "Version 0.", "body 0"), nil)
	b := e.build(t, agent("assistant", ""))
	var wg sync.WaitGroup
	errs := make(chan string, 1000)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if p := b.prompt(); !strings.Contains(p, "- notes: Version ") {
					errs <- "prompt lacks notes: " + p
				}
				res := b.call(t, map[string]any{"skill_name": "notes"})
				if res.IsError || !strings.Contains(res.Content, "\n\nbody ") {
					errs <- "get_skill: " + res.Content
				}
			}
		})
	}
	for i := 1; i <= 50; i++ {
		tmp := file + ".tmp"
		g.Expect(os.WriteFile(tmp, []byte(skillMD("notes", fmt.Sprintf("Version %d.", i), fmt.Sprintf("body %d", i))), 0o644)).To(Succeed())
		g.Expect(os.Rename(tmp, file)).To(Succeed()) // atomic, as editors save
	}
	wg.Wait()
	close(errs)
	var got []string
	for e := range errs {
		got = append(got, e)
	}
	g.Expect(got).To(BeEmpty())
}
