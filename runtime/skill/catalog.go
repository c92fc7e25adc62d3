package skill

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	skilltool "github.com/picobot/picobot/runtime/tool/skill"
)

// Catalog is the skill set of one agent: its sources in priority order,
// merged at every call so a changed ConfigMap or folder shows at the next
// turn. It implements get_skill's Library. Safe for concurrent use.
type Catalog struct {
	sources []source
	log     *slog.Logger

	mu     sync.Mutex
	logged map[string]struct{} // problems already logged
}

var _ skilltool.Library = (*Catalog)(nil)

func newCatalog(log *slog.Logger, sources ...source) *Catalog {
	return &Catalog{sources: sources, log: log, logged: map[string]struct{}{}}
}

// Snapshot is the merged skill set at one moment.
type Snapshot struct {
	// Skills are the effective skills, sorted by name.
	Skills []*Skill
	// Problems are the skills that could not be used and the sources that
	// could not be read, in source order.
	Problems []Problem
	byName   map[string]*Skill
	hidden   map[string][]*Skill // name -> lower-level skills it overrides
}

// Source names where the effective skill sk comes from: its level, except
// that an unchanged installed copy of a built-in skill is "built-in".
func (s *Snapshot) Source(sk *Skill) string {
	for _, h := range s.hidden[sk.Name] {
		if h.Level == LevelBuiltin && same(h, sk) {
			return LevelBuiltin.String()
		}
	}
	return sk.Level.String()
}

// overrides names the levels of the different skills sk hides; a copy
// identical to a lower one (an installed built-in) is named once, by the
// lower level.
func (s *Snapshot) overrides(sk *Skill) []string {
	hidden := s.hidden[sk.Name]
	var out []string
	for i, h := range hidden {
		dup := same(h, sk)
		for _, lower := range hidden[i+1:] {
			dup = dup || same(h, lower)
		}
		if !dup {
			out = append(out, h.Level.String())
		}
	}
	return out
}

func same(a, b *Skill) bool { return a.Body == b.Body && a.Description == b.Description }

// Get returns the effective skill named name, nil when there is none.
func (s *Snapshot) Get(name string) *Skill { return s.byName[name] }

// Snapshot merges the sources: a higher level overrides a lower one by name;
// within a level the first source wins and the duplicate is a problem. New
// problems are logged once.
func (c *Catalog) Snapshot(ctx context.Context) *Snapshot {
	snap := &Snapshot{byName: map[string]*Skill{}, hidden: map[string][]*Skill{}}
	for _, src := range c.sources {
		skills, problems := src.load(ctx)
		snap.Problems = append(snap.Problems, problems...)
		for _, sk := range skills {
			prev := snap.byName[sk.Name]
			switch {
			case prev == nil:
				snap.byName[sk.Name] = sk
			case prev.Level == sk.Level:
				snap.Problems = append(snap.Problems, Problem{Level: sk.Level, Origin: sk.Origin, Skill: sk.Name,
					Err: fmt.Errorf("duplicate %s skill %s: %s is used instead", sk.Level, sk.Name, prev.Origin),
					Fix: "rename or remove one of them"})
			default:
				snap.hidden[sk.Name] = append(snap.hidden[sk.Name], sk)
			}
		}
	}
	snap.Skills = make([]*Skill, 0, len(snap.byName))
	for _, sk := range snap.byName {
		snap.Skills = append(snap.Skills, sk)
	}
	sort.Slice(snap.Skills, func(i, j int) bool { return snap.Skills[i].Name < snap.Skills[j].Name })
	c.report(snap.Problems)
	return snap
}

// report logs problems not logged before; a problem that went away is
// forgotten, so it is logged again if it comes back.
func (c *Catalog) report(problems []Problem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := make(map[string]struct{}, len(problems))
	for _, p := range problems {
		key := p.String()
		now[key] = struct{}{}
		if _, seen := c.logged[key]; !seen {
			c.log.Warn("Skill unavailable", "level", p.Level.String(), "origin", p.Origin, "skill", p.Skill, "error", p.Err)
		}
	}
	c.logged = now
}

// List implements skilltool.Library.
func (c *Catalog) List(ctx context.Context) []skilltool.Entry {
	snap := c.Snapshot(ctx)
	out := make([]skilltool.Entry, 0, len(snap.Skills))
	for _, sk := range snap.Skills {
		out = append(out, skilltool.Entry{Name: sk.Name, Description: sk.Description, Source: snap.Source(sk), Overrides: snap.overrides(sk)})
	}
	return out
}

// Load implements skilltool.Library.
func (c *Catalog) Load(ctx context.Context, name string) (skilltool.Document, error) {
	sk, src, err := c.find(ctx, name)
	if err != nil {
		return skilltool.Document{}, err
	}
	doc := skilltool.Document{Name: sk.Name, Description: sk.Description, Source: src, Body: sk.Body, Folder: sk.Folder}
	if sk.files != nil {
		doc.Files = sk.files.list()
	}
	return doc, nil
}

// ReadFile implements skilltool.Library.
func (c *Catalog) ReadFile(ctx context.Context, name, file string) (string, error) {
	sk, _, err := c.find(ctx, name)
	if err != nil {
		return "", err
	}
	return readSkillFile(sk, file)
}

// maxNamesInError bounds the skill names an error lists.
const maxNamesInError = 30

// find returns the effective skill named name and its source.
func (c *Catalog) find(ctx context.Context, name string) (*Skill, string, error) {
	if err := ValidateName(name); err != nil {
		return nil, "", fmt.Errorf("%w; use action list to see the skills", err)
	}
	snap := c.Snapshot(ctx)
	if sk := snap.Get(name); sk != nil {
		return sk, snap.Source(sk), nil
	}
	for _, p := range snap.Problems {
		if p.Skill == name {
			return nil, "", fmt.Errorf("skill %s is broken and cannot be loaded (%w); tell the user, who can fix it", name, p.Err)
		}
	}
	names := make([]string, 0, len(snap.Skills))
	for _, sk := range snap.Skills {
		if len(names) == maxNamesInError {
			names = append(names, "...")
			break
		}
		names = append(names, sk.Name)
	}
	return nil, "", fmt.Errorf("no skill named %s; available: %s", name, listOrNone(names))
}

// countBySource summarises the skills for health, e.g. "2 agent, 4 built-in".
func (s *Snapshot) countBySource() string {
	counts := map[string]int{}
	for _, sk := range s.Skills {
		counts[s.Source(sk)]++
	}
	var parts []string
	for _, l := range []Level{LevelAgent, LevelShared, LevelBuiltin, LevelUser} {
		if n := counts[l.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, l))
		}
	}
	return strings.Join(parts, ", ")
}
