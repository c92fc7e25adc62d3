package skill

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

//go:embed builtin
var builtinFS embed.FS

// builtinSource serves the skills embedded in the binary; they are parsed
// once.
type builtinSource struct {
	skills   []*Skill
	problems []Problem
}

// Builtins returns the names of the built-in skills.
func Builtins() []string {
	names, _ := builtinNames()
	return names
}

func builtinNames() ([]string, error) {
	entries, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		return nil, fmt.Errorf("failed to list built-in skills: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func newBuiltinSource() *builtinSource {
	s := &builtinSource{}
	names, err := builtinNames()
	if err != nil {
		s.problems = append(s.problems, Problem{Level: LevelBuiltin, Origin: "built-in skills", Err: err})
		return s
	}
	for _, name := range names {
		origin := "built-in skill " + name
		sub, err := fs.Sub(builtinFS, path.Join("builtin", name))
		if err == nil {
			var data []byte
			if data, err = fs.ReadFile(sub, SkillFile); err == nil {
				var sk *Skill
				if sk, err = parseAs(data, name); err == nil {
					sk.Level, sk.Origin, sk.files = LevelBuiltin, origin, embeddedFiles(sub)
					s.skills = append(s.skills, sk)
					continue
				}
			}
		}
		s.problems = append(s.problems, Problem{Level: LevelBuiltin, Origin: origin, Skill: name, Err: err})
	}
	return s
}

func (s *builtinSource) load(context.Context) ([]*Skill, []Problem) { return s.skills, s.problems }

// InstallBuiltins copies each built-in skill to dir/<name>/ unless that
// folder exists, so a user's edits are never overwritten (delete the folder
// to get the current version back). It returns the names it installed.
func InstallBuiltins(dir string) ([]string, error) {
	names, err := builtinNames()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create skills folder %s: %w", dir, err)
	}
	var installed []string
	var errs []error
	for _, name := range names {
		dst := filepath.Join(dir, name)
		if _, err := os.Lstat(dst); err == nil || !errors.Is(err, fs.ErrNotExist) {
			continue // present (or unreadable): the user's, leave it alone
		}
		if err := installOne(name, dir, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		installed = append(installed, name)
	}
	return installed, errors.Join(errs...)
}

// installOne writes the skill into a temporary folder beside dst and renames
// it into place, so a crash never leaves half a skill that would then count
// as the user's.
func installOne(name, dir, dst string) error {
	tmp, err := os.MkdirTemp(dir, "."+name+"-")
	if err != nil {
		return fmt.Errorf("failed to install built-in skill %s: %w", name, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	sub, err := fs.Sub(builtinFS, path.Join("builtin", name))
	if err != nil {
		return fmt.Errorf("failed to install built-in skill %s: %w", name, err)
	}
	if err := os.CopyFS(tmp, sub); err != nil {
		return fmt.Errorf("failed to install built-in skill %s: %w", name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("failed to install built-in skill %s: %w", name, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, statErr := os.Lstat(dst); statErr == nil {
			return nil // installed concurrently by another process
		}
		return fmt.Errorf("failed to install built-in skill %s to %s: %w", name, dst, err)
	}
	return nil
}
