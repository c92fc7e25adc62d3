// Package skill implements get_skill, the tool that lists an agent's skills
// and loads one's instructions (or another file of its folder) on demand. The
// system prompt carries only each skill's name and description, so the full
// text costs context only when the model decides a skill applies.
//
// The skills themselves come from a Library; package runtime/skill provides
// the one that merges an agent's, its namespace's, the built-in and the
// user's skills.
package skill

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/picobot/picobot/runtime/tool"
)

// Name is the tool's name in the policy catalog.
const Name = "get_skill"

// Entry is one skill as list shows it.
type Entry struct {
	Name, Description string
	// Source says where the skill comes from ("agent", "shared",
	// "built-in", "user").
	Source string
	// Overrides names the sources of same-named skills this one hides.
	Overrides []string
}

// Document is a loaded skill.
type Document struct {
	Name, Description, Source string
	// Body is the skill's instructions (SKILL.md after its frontmatter).
	Body string
	// Folder is the skill's folder on disk ("" when it has none, e.g. a
	// ConfigMap skill); scripts there can be run from it.
	Folder string
	// Files are the other files of the skill, relative to its folder.
	Files []string
}

// Library serves the skills of one agent. Its errors are written for the
// model: they say what is wrong and what to do instead.
type Library interface {
	// List returns the effective skills, sorted by name.
	List(ctx context.Context) []Entry
	// Load returns the skill named name.
	Load(ctx context.Context, name string) (Document, error)
	// ReadFile returns a file of the skill named name; file is relative to
	// the skill's folder.
	ReadFile(ctx context.Context, name, file string) (string, error)
}

// Args are the arguments of get_skill.
type Args struct {
	Action    string `json:"action,omitempty" jsonschema:"get (default) or list"`
	SkillName string `json:"skill_name,omitempty" jsonschema:"get: the skill's name"`
	File      string `json:"file,omitempty" jsonschema:"get: a file of the skill's folder, instead of its instructions"`
}

const description = "Load a skill's instructions (action get) before a task it covers, or list the available skills (action list)."

// maxNameLen bounds skill_name and file in the schema; longer values are
// never valid.
const maxNameLen = 256

// New returns get_skill serving lib.
func New(lib Library) tool.Tool {
	return tool.New(Name, description, func(ctx context.Context, _ tool.Env, a Args) (tool.Result, error) {
		return run(ctx, lib, a), nil
	},
		tool.ReadOnly(),
		tool.Enum("action", "get", "list"),
		tool.Adjust(func(s *jsonschema.Schema) {
			for _, p := range []string{"skill_name", "file"} {
				if s.Properties[p] != nil {
					n := maxNameLen
					s.Properties[p].MaxLength = &n
				}
			}
		}),
	)
}

func run(ctx context.Context, lib Library, a Args) tool.Result {
	switch a.Action {
	case "list":
		return tool.Text(renderList(lib.List(ctx)))
	case "", "get":
	default:
		return tool.Errorf("error: unknown action %q; use get or list.", a.Action)
	}
	name := strings.TrimSpace(a.SkillName)
	if name == "" {
		return tool.Errorf("error: skill_name is required for get; use action list to see the skills.")
	}
	if a.File != "" {
		content, err := lib.ReadFile(ctx, name, a.File)
		if err != nil {
			return tool.Errorf("error: %v", err)
		}
		return tool.Text(fmt.Sprintf("File %s of skill %s:\n\n%s", a.File, name, content))
	}
	doc, err := lib.Load(ctx, name)
	if err != nil {
		return tool.Errorf("error: %v", err)
	}
	return tool.Text(renderDocument(doc))
}

func renderList(entries []Entry) string {
	if len(entries) == 0 {
		return "No skills are available."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d skills (load one with action get):\n", len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "- %s [%s", e.Name, e.Source)
		if len(e.Overrides) > 0 {
			fmt.Fprintf(&b, ", overrides %s", strings.Join(e.Overrides, ", "))
		}
		fmt.Fprintf(&b, "]: %s\n", e.Description)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func renderDocument(d Document) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Skill %s [%s]: %s\n", d.Name, d.Source, d.Description)
	if d.Folder != "" {
		fmt.Fprintf(&b, "Folder: %s\n", d.Folder)
	}
	if len(d.Files) > 0 {
		fmt.Fprintf(&b, "Files (read one with get_skill file=<name>): %s\n", strings.Join(d.Files, ", "))
	}
	b.WriteString("\n")
	b.WriteString(d.Body)
	return b.String()
}
