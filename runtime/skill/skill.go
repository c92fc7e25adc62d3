// Package skill gives agents skills: folders with a SKILL.md (YAML
// frontmatter with a name and a description, then instructions; other files
// of the folder may be referenced) that the model loads with get_skill when a
// task calls for one. The system prompt lists only names and descriptions.
//
// Skills come from four levels; a higher level overrides a lower one by name:
//
//  1. agent: the Agent's spec.skills, in list order (inline content, or a
//     configMapRef to a key of a ConfigMap in the Agent's namespace; when that
//     key is SKILL.md the ConfigMap's other keys are files of the skill); then,
//     in embedded mode only, <manifests dir>/skills/<name>/SKILL.md, which
//     every agent of that manifests folder gets;
//  2. shared: ConfigMaps of the Agent's namespace labelled
//     skills.picobot.io/shared=true, one skill per ConfigMap (key SKILL.md,
//     other keys are files; the skill's name is its frontmatter name), in
//     ConfigMap name order; then, in embedded mode only,
//     ~/.picobot/skills/<name>/SKILL.md;
//  3. built-in: the skills embedded in the binary; embedded mode also installs
//     each to ~/.picobot/skills/<name>/ when that folder is absent, so it can
//     be edited there and is never overwritten;
//  4. user: ~/.agents/skills/<name>/SKILL.md (embedded mode only).
//
// In embedded mode the ConfigMaps are the ConfigMap manifests of the
// manifests folder (read at start); in cluster mode they are watched, so an
// edit reaches running sessions at their next turn, as does any change of a
// skill folder. A folder's name, a spec.skills name and the frontmatter name
// must agree. Within a level the first source in the order above wins and the
// duplicate is reported. A broken skill is skipped, logged and reported by
// health; it never stops the agent (a valid skill of the same name at a lower
// level then serves).
package skill

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Limits of a skill.
const (
	// MaxSkillBytes bounds a SKILL.md (the Agent CRD's limit of inline
	// content).
	MaxSkillBytes = 256 << 10
	// MaxDescriptionLen bounds a description, in characters.
	MaxDescriptionLen = 1024
	// MaxFileBytes bounds another file of a skill that get_skill returns.
	MaxFileBytes = 256 << 10
	// MaxNameLen bounds a skill name.
	MaxNameLen = 63
)

// SkillFile is the file that makes a folder a skill.
const SkillFile = "SKILL.md"

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateName checks a skill name: 1-63 lowercase letters, digits and
// hyphens, starting and ending with a letter or digit (the Agent CRD's rule).
// It also keeps names safe as folder names: no separators, no dots.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%q is not a valid skill name: use 1-%d lowercase letters, digits and hyphens, starting and ending with a letter or digit", name, MaxNameLen)
	}
	return nil
}

// Level is a skill's priority; a lower number wins.
type Level int

// Levels, highest priority first.
const (
	LevelAgent Level = iota + 1
	LevelShared
	LevelBuiltin
	LevelUser
)

// String names the level as get_skill list shows it.
func (l Level) String() string {
	switch l {
	case LevelAgent:
		return "agent"
	case LevelShared:
		return "shared"
	case LevelBuiltin:
		return "built-in"
	case LevelUser:
		return "user"
	}
	return fmt.Sprintf("level %d", int(l))
}

// Skill is one parsed skill.
type Skill struct {
	Name        string
	Description string
	// Body is the instructions after the frontmatter.
	Body  string
	Level Level
	// Origin says where the skill was read from, for messages.
	Origin string
	// Folder is the skill's folder on disk, "" when it has none.
	Folder string
	files  files
}

// Problem is a skill that could not be used, or a source that could not be
// read.
type Problem struct {
	Level Level
	// Origin is where the problem is (a file, a ConfigMap).
	Origin string
	// Skill is the skill's name when known.
	Skill string
	Err   error
	// Fix tells the operator what to do.
	Fix string
}

// String formats the problem as "origin: error".
func (p Problem) String() string { return p.Origin + ": " + p.Err.Error() }

// Parse reads a SKILL.md: a line "---", YAML with name and description
// (other fields are allowed and ignored), a line "---", then the
// instructions. Errors say what is wrong in words an author can act on.
func Parse(data []byte) (*Skill, error) {
	if len(data) > MaxSkillBytes {
		return nil, oversize(int64(len(data)))
	}
	if !utf8.Valid(data) {
		return nil, errors.New("SKILL.md is not UTF-8 text")
	}
	text := strings.ReplaceAll(string(bytes.TrimPrefix(data, []byte("\uFEFF"))), "\r\n", "\n")
	first, rest, _ := strings.Cut(text, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		return nil, errors.New("missing frontmatter: SKILL.md must start with a line \"---\", then YAML with name and description, then a line \"---\"")
	}
	front, body, ok := cutDelimiter(rest)
	if !ok {
		return nil, errors.New("frontmatter is not closed: add a line \"---\" after the name and description")
	}
	var fields map[string]any
	if err := yaml.Unmarshal([]byte(front), &fields); err != nil {
		return nil, fmt.Errorf("frontmatter is not valid YAML: %w", err)
	}
	name, err := stringField(fields, "name")
	if err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("frontmatter name: %w", err)
	}
	desc, err := stringField(fields, "description")
	if err != nil {
		return nil, err
	}
	desc = strings.Join(strings.Fields(desc), " ")
	if n := utf8.RuneCountInString(desc); n > MaxDescriptionLen {
		return nil, fmt.Errorf("description is %d characters; the limit is %d: say when to use the skill, and put the rest in the body", n, MaxDescriptionLen)
	}
	body = strings.TrimSpace(body)
	if body == "" {
		return nil, errors.New("SKILL.md has no instructions after the frontmatter")
	}
	return &Skill{Name: name, Description: desc, Body: body}, nil
}

func oversize(size int64) error {
	return fmt.Errorf("SKILL.md is %d bytes; the limit is %d (%d KiB): move detail into other files of the skill folder", size, MaxSkillBytes, MaxSkillBytes>>10)
}

// cutDelimiter splits s at its first line "---".
func cutDelimiter(s string) (before, after string, ok bool) {
	pos := 0
	for pos <= len(s) {
		line, _, _ := strings.Cut(s[pos:], "\n")
		if strings.TrimRight(line, " \t") == "---" {
			end := min(pos+len(line)+1, len(s))
			return s[:pos], s[end:], true
		}
		pos += len(line) + 1
	}
	return "", "", false
}

func stringField(fields map[string]any, key string) (string, error) {
	v, ok := fields[key]
	if !ok || v == nil {
		return "", fmt.Errorf("frontmatter has no %s", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("frontmatter %s must be text, not %T", key, v)
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("frontmatter %s is empty", key)
	}
	return s, nil
}

// parseAs parses data as the SKILL.md of the skill named want (a folder,
// spec.skills or ConfigMap name; "" accepts any).
func parseAs(data []byte, want string) (*Skill, error) {
	s, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if want != "" && s.Name != want {
		return nil, fmt.Errorf("frontmatter name %q does not match the skill's name %q", s.Name, want)
	}
	return s, nil
}
