package skill_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/skill"
)

// benchSkill is a SKILL.md of about 4 KiB.
func benchSkill(name string) string {
	return skillMD(name, "Use when the user asks for "+name+"; it explains the steps, the pitfalls and the checks.",
		strings.Repeat("1. Do the next step carefully and check the result before going on.\n", 60))
}

func BenchmarkParse(b *testing.B) {
	data := []byte(benchSkill("bench"))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := skill.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// embeddedBench is an embedded-mode agent with 50 folder skills in the
// manifests folder, 20 in ~/.agents/skills and the built-ins.
func embeddedBench(b *testing.B) *built {
	e := &embeddedEnv{home: b.TempDir(), manifests: b.TempDir()}
	e.feature = skill.NewFeature(skill.Options{ManifestsDir: e.manifests, Home: e.home})
	for i := range 50 {
		name := fmt.Sprintf("agent-%02d", i)
		writeSkill(b, e.agentDir(), name, benchSkill(name), nil)
	}
	for i := range 20 {
		name := fmt.Sprintf("user-%02d", i)
		writeSkill(b, e.userDir(), name, benchSkill(name), nil)
	}
	return build(b, e.feature, &feature.Host{Mode: feature.ModeEmbedded, Tenant: "default"}, agent("bench", "default"))
}

// BenchmarkPromptEmbedded is the per-turn cost of the skills prompt section
// in embedded mode: stat the folders, reuse what was parsed, render 74 skills.
func BenchmarkPromptEmbedded(b *testing.B) {
	bt := embeddedBench(b)
	want := len(bt.prompt())
	for b.Loop() {
		if len(bt.prompt()) != want {
			b.Fatal("prompt changed")
		}
	}
}

// BenchmarkGetSkillEmbedded is one get_skill call in embedded mode.
func BenchmarkGetSkillEmbedded(b *testing.B) {
	bt := embeddedBench(b)
	for b.Loop() {
		if res := bt.call(b, map[string]any{"skill_name": "agent-25"}); res.IsError {
			b.Fatal(res.Content)
		}
	}
}

// BenchmarkPromptCluster is the per-turn cost of the skills prompt section in
// cluster mode with 50 shared ConfigMap skills read from the watch cache.
func BenchmarkPromptCluster(b *testing.B) {
	if restConfig == nil {
		b.Skip(skipReason)
	}
	c, err := client.NewWithWatch(restConfig, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ns := namespace(b, c)
	for i := range 50 {
		name := fmt.Sprintf("shared-%02d", i)
		if err := c.Create(context.Background(), configMap(ns, name, true, map[string]string{skill.SkillFile: benchSkill(name)})); err != nil {
			b.Fatal(err)
		}
	}
	bt := build(b, skill.NewFeature(skill.Options{}), &feature.Host{Mode: feature.ModeCluster, Tenant: ns, Kube: c}, agent("bench", ns))
	if got := bt.summary().Message; got != "54 skills (50 shared, 4 built-in)" {
		b.Fatalf("unexpected skills: %s", got)
	}
	want := len(bt.prompt())
	for b.Loop() {
		if len(bt.prompt()) != want {
			b.Fatal("prompt changed")
		}
	}
}
