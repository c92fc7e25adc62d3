package skill

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/session"
)

// Bounds of the prompt section: each turn pays for it, so long descriptions
// are shortened and a very long list names the rest without descriptions.
const (
	promptDescriptionLen = 200
	promptBudget         = 6 << 10
	promptMaxNames       = 100
)

const promptHeader = "## Skills\n" +
	"Skills are instructions for particular tasks. When a task matches a skill below, load it with get_skill (skill_name) first and follow it.\n"

// Prompt is the system prompt section listing the skills by name and
// description ("" when there are none). Its output for an unchanged skill set
// is byte-identical, so prompt caches keep working.
func (c *Catalog) Prompt(ctx context.Context, _ session.PromptInput) string {
	return renderPrompt(c.Snapshot(ctx).Skills)
}

func renderPrompt(skills []*Skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(promptHeader)
	for i, sk := range skills {
		line := "- " + sk.Name + ": " + shorten(sk.Description, promptDescriptionLen) + "\n"
		if b.Len()+len(line) > promptBudget {
			rest := skills[i:]
			b.WriteString("More skills (get_skill action list describes them): ")
			for j, r := range rest {
				if j == promptMaxNames {
					b.WriteString(", ...")
					break
				}
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(r.Name)
			}
			b.WriteString("\n")
			break
		}
		b.WriteString(line)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// shorten cuts s to at most n characters, ending with "…" when cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
