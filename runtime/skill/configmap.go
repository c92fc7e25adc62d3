package skill

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// SharedLabel marks a ConfigMap as a namespace-shared skill when its value
// is "true". Such a ConfigMap holds one skill: the key SKILL.md is its
// instructions and every other key of data is a file of the skill folder.
// The skill's name is the frontmatter name (the ConfigMap may be named
// differently, e.g. skill-<name>).
const SharedLabel = "skills.picobot.io/shared"

// configMaps reads the ConfigMaps that hold skills, in the Agent's
// namespace.
type configMaps interface {
	// get returns the ConfigMap named name, nil when there is none.
	get(ctx context.Context, name string) (*corev1.ConfigMap, error)
	// shared returns the ConfigMaps labelled SharedLabel=true, sorted by name.
	shared(ctx context.Context) ([]*corev1.ConfigMap, error)
	// where names the place ConfigMaps come from, for messages.
	where() string
}

// memo keeps the skills parsed from ConfigMaps, keyed by object identity and
// resourceVersion, so an unchanged ConfigMap is parsed once. Entries not
// used by the latest load are dropped.
type memo struct {
	mu        sync.Mutex
	cur, next map[string]memoEntry
}

type memoEntry struct {
	skill *Skill
	err   error
}

func (m *memo) begin() {
	m.mu.Lock()
	m.next = map[string]memoEntry{}
}

func (m *memo) end() {
	m.cur, m.next = m.next, nil
	m.mu.Unlock()
}

// parse parses the SKILL.md text of cm's key, from the memo when cm did not
// change.
func (m *memo) parse(cm *corev1.ConfigMap, key, want string, build func(*Skill)) (*Skill, error) {
	id := string(cm.UID) + "/" + cm.Namespace + "/" + cm.Name + "/" + cm.ResourceVersion + "/" + key + "/" + want
	e, ok := m.cur[id]
	if !ok {
		e.skill, e.err = parseAs([]byte(cm.Data[key]), want)
		if e.err == nil {
			build(e.skill)
		}
	}
	m.next[id] = e
	return e.skill, e.err
}

// otherKeys returns the data keys of cm besides key, as skill files.
func otherKeys(cm *corev1.ConfigMap, key string) files {
	out := mapFiles{}
	for k, v := range cm.Data {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// specSource serves an Agent's spec.skills: inline content, or a ConfigMap
// key (read at every turn, so edits apply without a restart). When the key
// is SKILL.md, the ConfigMap's other keys are files of the skill, as for a
// shared skill.
type specSource struct {
	skills []picobotv1alpha1.SkillSource
	cms    configMaps     // nil: configMapRef entries cannot be served
	inline map[int]*Skill // by index in skills
	bad    []Problem      // entries that are invalid whatever the ConfigMaps hold
	badIdx map[int]bool   // their indexes
	memo   memo
}

func newSpecSource(skills []picobotv1alpha1.SkillSource, cms configMaps) *specSource {
	s := &specSource{skills: skills, cms: cms, inline: map[int]*Skill{}, badIdx: map[int]bool{}}
	for i, src := range skills {
		origin := fmt.Sprintf("spec.skills[%d] (%s)", i, src.Name)
		fail := func(err error, fix string) {
			s.bad = append(s.bad, Problem{Level: LevelAgent, Origin: origin, Skill: src.Name, Err: err, Fix: fix})
			s.badIdx[i] = true
		}
		if err := ValidateName(src.Name); err != nil {
			fail(err, "rename the skill")
			continue
		}
		switch {
		case src.Content != "" && src.ConfigMapRef != nil:
			fail(fmt.Errorf("skill %s has both content and configMapRef", src.Name), "keep one of them")
		case src.ConfigMapRef != nil:
			if err := validateRef(src.ConfigMapRef); err != nil {
				fail(err, "fix the configMapRef")
			}
		case src.Content != "":
			sk, err := parseAs([]byte(src.Content), src.Name)
			if err != nil {
				fail(err, "fix the content of the skill in the Agent")
				continue
			}
			sk.Level, sk.Origin = LevelAgent, origin
			s.inline[i] = sk
		default:
			fail(fmt.Errorf("skill %s has neither content nor configMapRef", src.Name), "give it content or a configMapRef")
		}
	}
	return s
}

// validateRef rejects ConfigMap names and keys the API server would never
// accept, so they cannot reach a lookup or a file path.
func validateRef(ref *corev1.ConfigMapKeySelector) error {
	if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
		return fmt.Errorf("configMapRef name %q is not a valid ConfigMap name: %s", ref.Name, errs[0])
	}
	if errs := validation.IsConfigMapKey(ref.Key); len(errs) > 0 {
		return fmt.Errorf("configMapRef key %q is not a valid ConfigMap key: %s", ref.Key, errs[0])
	}
	return nil
}

func (s *specSource) load(ctx context.Context) ([]*Skill, []Problem) {
	problems := append([]Problem(nil), s.bad...)
	s.memo.begin()
	defer s.memo.end()
	var out []*Skill
	for i, src := range s.skills {
		if sk := s.inline[i]; sk != nil {
			out = append(out, sk)
			continue
		}
		ref := src.ConfigMapRef
		if ref == nil || s.badIdx[i] {
			continue // reported in s.bad
		}
		origin := fmt.Sprintf("spec.skills[%d] (%s): ConfigMap %s key %s", i, src.Name, ref.Name, ref.Key)
		sk, p := s.fromRef(ctx, src.Name, ref, origin)
		if p != nil {
			if optional := ref.Optional != nil && *ref.Optional; !optional || p.Skill != "" {
				problems = append(problems, *p)
			}
			continue
		}
		out = append(out, sk)
	}
	return out, problems
}

// fromRef reads one configMapRef skill. A problem with Skill unset is a
// missing ConfigMap or key, which an optional ref tolerates.
func (s *specSource) fromRef(ctx context.Context, name string, ref *corev1.ConfigMapKeySelector, origin string) (*Skill, *Problem) {
	fail := func(err error, fix string, missing bool) (*Skill, *Problem) {
		p := &Problem{Level: LevelAgent, Origin: origin, Err: err, Fix: fix}
		if !missing {
			p.Skill = name
		}
		return nil, p
	}
	if s.cms == nil {
		return fail(fmt.Errorf("skill %s needs ConfigMap %s, and no ConfigMaps are available here", name, ref.Name),
			"give the skill inline content", false)
	}
	cm, err := s.cms.get(ctx, ref.Name)
	if err != nil {
		return fail(fmt.Errorf("failed to read ConfigMap %s: %w", ref.Name, err), "check that the runtime may read ConfigMaps", false)
	}
	if cm == nil {
		return fail(fmt.Errorf("ConfigMap %s does not exist in %s", ref.Name, s.cms.where()), "create it, or fix spec.skills configMapRef", true)
	}
	if _, ok := cm.Data[ref.Key]; !ok {
		return fail(fmt.Errorf("ConfigMap %s has no key %s (keys: %s)", ref.Name, ref.Key, listOrNone(mapFiles(cm.Data).list())),
			"add the key, or fix spec.skills configMapRef", true)
	}
	sk, err := s.memo.parse(cm, ref.Key, name, func(sk *Skill) {
		sk.Level, sk.Origin = LevelAgent, origin
		if ref.Key == SkillFile {
			sk.files = otherKeys(cm, ref.Key)
		}
	})
	if err != nil {
		return fail(err, "fix the SKILL.md text in ConfigMap "+ref.Name, false)
	}
	return sk, nil
}

// sharedSource serves the namespace's ConfigMaps labelled SharedLabel=true.
type sharedSource struct {
	cms  configMaps
	memo memo
}

func (s *sharedSource) load(ctx context.Context) ([]*Skill, []Problem) {
	list, err := s.cms.shared(ctx)
	if err != nil {
		return nil, []Problem{{Level: LevelShared, Origin: "shared skill ConfigMaps in " + s.cms.where(),
			Err: fmt.Errorf("failed to list ConfigMaps labelled %s=true: %w", SharedLabel, err), Fix: "check that the runtime may list ConfigMaps"}}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	s.memo.begin()
	defer s.memo.end()
	var out []*Skill
	var problems []Problem
	for _, cm := range list {
		origin := "ConfigMap " + cm.Name
		if len(out) >= maxSkillsPerSource {
			problems = append(problems, Problem{Level: LevelShared, Origin: origin,
				Err: fmt.Errorf("more than %d shared skills; the rest are ignored", maxSkillsPerSource), Fix: "remove shared skills nobody uses"})
			break
		}
		if _, ok := cm.Data[SkillFile]; !ok {
			problems = append(problems, Problem{Level: LevelShared, Origin: origin,
				Err: fmt.Errorf("ConfigMap is labelled %s=true but has no key %s", SharedLabel, SkillFile),
				Fix: "put the skill under the key " + SkillFile + ", or remove the label"})
			continue
		}
		sk, err := s.memo.parse(cm, SkillFile, "", func(sk *Skill) {
			sk.Level, sk.Origin, sk.files = LevelShared, origin, otherKeys(cm, SkillFile)
		})
		if err != nil {
			problems = append(problems, Problem{Level: LevelShared, Origin: origin, Err: err, Fix: "fix the SKILL.md key of ConfigMap " + cm.Name})
			continue
		}
		out = append(out, sk)
	}
	return out, problems
}

// staticConfigMaps are the ConfigMap manifests of an embedded-mode folder
// in one namespace.
type staticConfigMaps struct {
	dir    string
	byName map[string]*corev1.ConfigMap
}

func newStaticConfigMaps(dir, namespace string, all []*corev1.ConfigMap) *staticConfigMaps {
	s := &staticConfigMaps{dir: dir, byName: map[string]*corev1.ConfigMap{}}
	for _, cm := range all {
		if cm.Namespace == namespace {
			s.byName[cm.Name] = cm
		}
	}
	return s
}

func (s *staticConfigMaps) get(_ context.Context, name string) (*corev1.ConfigMap, error) {
	return s.byName[name], nil
}

func (s *staticConfigMaps) shared(context.Context) ([]*corev1.ConfigMap, error) {
	var out []*corev1.ConfigMap
	for _, cm := range s.byName {
		if cm.Labels[SharedLabel] == "true" {
			out = append(out, cm)
		}
	}
	return out, nil
}

func (s *staticConfigMaps) where() string { return "the manifests folder " + s.dir }
