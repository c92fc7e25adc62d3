package skill_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/runtime/tool/skill"
)

// library is an in-memory Library: the tool's boundary. The real one
// (runtime/skill.Catalog) is tested through this tool in its own package.
type library struct {
	docs  map[string]skill.Document
	files map[string]string // "skill/file" -> content
}

func (l library) List(context.Context) []skill.Entry {
	return []skill.Entry{
		{Name: "alpha", Description: "First.", Source: "agent", Overrides: []string{"built-in"}},
		{Name: "beta", Description: "Second.", Source: "built-in"},
	}
}

func (l library) Load(_ context.Context, name string) (skill.Document, error) {
	d, ok := l.docs[name]
	if !ok {
		return d, fmt.Errorf("no skill named %s; available: alpha, beta", name)
	}
	return d, nil
}

func (l library) ReadFile(_ context.Context, name, file string) (string, error) {
	c, ok := l.files[name+"/"+file]
	if !ok {
		return "", errors.New("no such file")
	}
	return c, nil
}

func call(t *testing.T, reg *tool.Registry, args string) tool.Result {
	t.Helper()
	return reg.Execute(context.Background(), tool.Env{}, llm.ToolCall{ID: "1", Name: skill.Name, Arguments: args})
}

func TestGetSkill(t *testing.T) {
	lib := library{
		docs: map[string]skill.Document{
			"alpha": {Name: "alpha", Description: "First.", Source: "agent", Body: "# Alpha\nDo it.", Folder: "/skills/alpha", Files: []string{"ref.md"}},
			"beta":  {Name: "beta", Description: "Second.", Source: "built-in", Body: "Beta body."},
		},
		files: map[string]string{"alpha/ref.md": "reference text"},
	}
	reg, err := tool.NewRegistry(skill.New(lib))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	cases := []struct {
		name, args string
		isError    bool
		want       string // exact content
	}{
		{"list", `{"action":"list"}`, false, "2 skills (load one with action get):\n- alpha [agent, overrides built-in]: First.\n- beta [built-in]: Second."},
		{"get is the default action", `{"skill_name":"beta"}`, false, "Skill beta [built-in]: Second.\n\nBeta body."},
		{"get with folder and files", `{"action":"get","skill_name":"alpha"}`, false,
			"Skill alpha [agent]: First.\nFolder: /skills/alpha\nFiles (read one with get_skill file=<name>): ref.md\n\n# Alpha\nDo it."},
		{"file", `{"skill_name":"alpha","file":"ref.md"}`, false, "File ref.md of skill alpha:\n\nreference text"},
		{"null optional arguments", `{"action":null,"skill_name":"beta","file":null}`, false, "Skill beta [built-in]: Second.\n\nBeta body."},
		{"get needs a name", `{"action":"get"}`, true, "error: skill_name is required for get; use action list to see the skills."},
		{"blank name", `{"skill_name":"  "}`, true, "error: skill_name is required for get; use action list to see the skills."},
		{"unknown skill", `{"skill_name":"gamma"}`, true, "error: no skill named gamma; available: alpha, beta"},
		{"missing file", `{"skill_name":"alpha","file":"nope.md"}`, true, "error: no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, reg, tc.args)
			g.Expect(res.IsError).To(Equal(tc.isError), res.Content)
			g.Expect(res.Content).To(Equal(tc.want))
		})
	}
}

func TestGetSkillRejectsBadArguments(t *testing.T) {
	reg, err := tool.NewRegistry(skill.New(library{}))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'a'
	}
	for _, args := range []string{
		`{"action":"delete","skill_name":"alpha"}`,
		`{"skill_name":"` + string(long) + `"}`,
		`{"skill_name":"alpha","extra":1}`,
		`{"skill_name":42}`,
		`not json`,
	} {
		t.Run(args[:min(len(args), 30)], func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, reg, args)
			g.Expect(res.IsError).To(BeTrue())
			g.Expect(res.Content).To(ContainSubstring("get_skill"))
		})
	}
}

// TestDeclaration keeps the tool cheap to declare and in the policy catalog.
func TestDeclaration(t *testing.T) {
	g := NewWithT(t)
	tl := skill.New(library{})
	pol, err := policy.Resolve(policy.DefaultCatalog(), policy.Spec{Allow: []string{policy.GroupSkills}}, "", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pol.Tools).To(Equal([]string{tl.Name()}))
	g.Expect(tl.Traits().ReadOnly).To(BeTrue())
	var schema map[string]any
	g.Expect(json.Unmarshal(tl.Schema(), &schema)).To(Succeed())
	g.Expect(schema["required"]).To(BeNil())
	g.Expect(schema["additionalProperties"]).To(Equal(false))
	g.Expect(len(tl.Description()) + len(tl.Schema())).To(BeNumerically("<", 600))
}
