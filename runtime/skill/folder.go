package skill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// maxSkillsPerSource bounds the skills one folder or namespace contributes;
// the prompt lists every skill, so thousands would drown it.
const maxSkillsPerSource = 256

// source yields the skills of one place. load is called at every turn, so a
// source caches what it parsed and re-reads only what changed.
type source interface {
	load(ctx context.Context) ([]*Skill, []Problem)
}

// folderSource reads <dir>/<name>/SKILL.md. It re-parses only when the
// folder's listing or a SKILL.md's size or modification time changed.
type folderSource struct {
	dir   string
	level Level

	mu          sync.Mutex
	fingerprint string
	skills      []*Skill
	problems    []Problem
}

func newFolderSource(dir string, level Level) *folderSource {
	return &folderSource{dir: dir, level: level}
}

// entry is one candidate skill folder.
type entry struct {
	name, folder string
	info         fs.FileInfo // of SKILL.md; nil when missing
	err          error
}

func (s *folderSource) load(context.Context) ([]*Skill, []Problem) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []Problem{{Level: s.level, Origin: s.dir, Err: fmt.Errorf("failed to list skill folder: %w", err),
			Fix: "make the folder readable, or remove it"}}
	}
	var cands []entry
	var fingerprint strings.Builder
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		folder := filepath.Join(s.dir, e.Name())
		if !e.IsDir() {
			if e.Type()&fs.ModeSymlink == 0 {
				continue // a stray file (README.md) is not a skill
			}
			if fi, err := os.Stat(folder); err != nil || !fi.IsDir() { // a linked skill folder counts
				continue
			}
		}
		c := entry{name: e.Name(), folder: folder}
		c.info, c.err = os.Stat(filepath.Join(folder, SkillFile))
		cands = append(cands, c)
		fingerprint.WriteString(c.name)
		if c.info != nil {
			fingerprint.WriteString("|" + strconv.FormatInt(c.info.Size(), 10) + "|" + strconv.FormatInt(c.info.ModTime().UnixNano(), 10))
		}
		fingerprint.WriteString("\n")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fingerprint.String() == s.fingerprint && s.fingerprint != "" {
		return s.skills, s.problems
	}
	s.skills, s.problems = nil, nil
	for _, c := range cands {
		if len(s.skills) >= maxSkillsPerSource {
			s.problems = append(s.problems, Problem{Level: s.level, Origin: s.dir,
				Err: fmt.Errorf("more than %d skills; the rest are ignored", maxSkillsPerSource), Fix: "remove skills you do not use"})
			break
		}
		sk, err := s.parse(c)
		if err != nil {
			s.problems = append(s.problems, Problem{Level: s.level, Origin: filepath.Join(c.folder, SkillFile), Skill: c.name, Err: err,
				Fix: "fix or remove the skill folder " + c.folder})
			continue
		}
		s.skills = append(s.skills, sk)
	}
	s.fingerprint = fingerprint.String()
	return s.skills, s.problems
}

func (s *folderSource) parse(c entry) (*Skill, error) {
	if err := ValidateName(c.name); err != nil {
		return nil, fmt.Errorf("folder name: %w", err)
	}
	if c.err != nil {
		if errors.Is(c.err, fs.ErrNotExist) {
			return nil, errors.New("the folder has no SKILL.md")
		}
		return nil, c.err
	}
	if c.info.Size() > MaxSkillBytes {
		return nil, oversize(c.info.Size())
	}
	data, err := readLimited(filepath.Join(c.folder, SkillFile))
	if err != nil {
		return nil, err
	}
	sk, err := parseAs(data, c.name)
	if err != nil {
		return nil, err
	}
	sk.Level, sk.Origin, sk.Folder, sk.files = s.level, filepath.Join(c.folder, SkillFile), c.folder, dirFiles(c.folder)
	return sk, nil
}

// readLimited reads a SKILL.md, at most one byte past the limit so an
// oversize file is reported without being read whole.
func readLimited(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", file, err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", file, err)
	}
	return data, nil
}
