// Package health is the one service that says whether PicoBot can run here:
// core requirements, the requirements of enabled features (the browser:
// executable present and a real headless launch) and optional features, each
// check with the exact fix for what is missing. `picobot health [--json]`,
// the health tool, the /health slash command and the web UI's health page all
// read the same Report.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Check is the outcome of one requirement: a line of `picobot health` and of
// the gateway's /health (gateway.Check is this type).
type Check struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	// Kind is the kind of the check's group (set by Service.Report), so a
	// flat list still says which checks are required.
	Kind Kind `json:"kind,omitempty"`
}

// Kind says how much a failing check matters.
type Kind string

// Kinds, in report order.
const (
	// Core requirements: PicoBot does not work without them.
	Core Kind = "core"
	// Feature requirements: a feature the configuration enables does not
	// work without them.
	Feature Kind = "feature"
	// Optional features: missing ones degrade or disable something that is
	// not required; they never make the report fail.
	Optional Kind = "optional"
)

// Source produces checks of one kind (a feature's, the core's).
type Source struct {
	Kind Kind
	// Name is the group's title ("browser", "runtime").
	Name string
	Run  func(ctx context.Context) []Check
}

// Group is the checks of one source.
type Group struct {
	Kind   Kind    `json:"kind"`
	Name   string  `json:"name"`
	Checks []Check `json:"checks"`
}

// Report is the outcome of every check.
type Report struct {
	// OK is false when a core or feature check failed.
	OK     bool    `json:"ok"`
	Groups []Group `json:"groups"`
}

// Service runs the registered sources. It is safe for concurrent use.
type Service struct {
	mu      sync.Mutex
	sources []Source
	timeout time.Duration
}

// NewService returns a service running sources; each source gets at most a
// minute.
func NewService(sources ...Source) *Service {
	return &Service{sources: sources, timeout: time.Minute}
}

// Add registers more sources.
func (s *Service) Add(sources ...Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sources = append(s.sources, sources...)
}

// Report runs every source concurrently and returns the checks grouped,
// core first, then features, then optional ones. A source that does not
// finish in time is reported as a failed check.
func (s *Service) Report(ctx context.Context) Report {
	s.mu.Lock()
	sources := append([]Source(nil), s.sources...)
	s.mu.Unlock()
	groups := make([]Group, len(sources))
	var wg sync.WaitGroup
	for i, src := range sources {
		wg.Go(func() {
			groups[i] = Group{Kind: src.Kind, Name: src.Name, Checks: runSource(ctx, src, s.timeout)}
		})
	}
	wg.Wait()
	return NewReport(groups...)
}

// NewReport orders groups core first, then features, then optional ones
// (dropping empty ones), marks each check with its group's kind and
// decides OK: no core or feature check failed.
func NewReport(groups ...Group) Report {
	r := Report{OK: true}
	for _, k := range []Kind{Core, Feature, Optional} {
		for _, g := range groups {
			if g.Kind != k || len(g.Checks) == 0 {
				continue
			}
			cs := slices.Clone(g.Checks)
			for j := range cs {
				cs[j].Kind = k
				if !cs[j].OK && k != Optional {
					r.OK = false
				}
			}
			g.Checks = cs
			r.Groups = append(r.Groups, g)
		}
	}
	return r
}

func runSource(ctx context.Context, src Source, timeout time.Duration) []Check {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan []Check, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- []Check{{Name: src.Name, Message: fmt.Sprintf("the check failed unexpectedly: %v", p)}}
			}
		}()
		done <- src.Run(ctx)
	}()
	select {
	case cs := <-done:
		return cs
	case <-ctx.Done():
		return []Check{{Name: src.Name, Message: fmt.Sprintf("the check did not finish: %v", ctx.Err())}}
	}
}

// Failures returns the failed core and feature checks.
func (r Report) Failures() []Check {
	var out []Check
	for _, g := range r.Groups {
		if g.Kind == Optional {
			continue
		}
		for _, c := range g.Checks {
			if !c.OK {
				out = append(out, c)
			}
		}
	}
	return out
}

// Checks returns every check, its name prefixed with its group
// ("browser: executable"), for lists without groups such as gateway's.
func (r Report) Checks() []Check {
	var out []Check
	for _, g := range r.Groups {
		for _, c := range g.Checks {
			if c.Name != g.Name {
				c.Name = g.Name + ": " + c.Name
			}
			if g.Kind == Optional && !c.OK {
				c.Message = "optional: " + c.Message
			}
			out = append(out, c)
		}
	}
	return out
}

// JSON is the report's JSON form.
func (r Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return b
}

// Title is how people read a kind: core checks are required, feature checks
// are required by a feature the configuration enables, optional ones never
// fail the report.
func (k Kind) Title() string {
	switch k {
	case Core:
		return "Required"
	case Feature:
		return "Required by enabled features"
	case Optional:
		return "Optional"
	}
	return string(k)
}

// Text is the report for people: one line per check, the fix under each
// failing one, and a verdict.
func (r Report) Text() string {
	var b strings.Builder
	last := Kind("")
	for _, g := range r.Groups {
		if g.Kind != last {
			if last != "" {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%s\n", g.Kind.Title())
			last = g.Kind
		}
		for _, c := range g.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
				if g.Kind == Optional {
					mark = "warn"
				}
			}
			name := c.Name
			if name != g.Name {
				name = g.Name + ": " + name
			}
			fmt.Fprintf(&b, "  [%s] %s — %s\n", mark, name, c.Message)
			if !c.OK && c.Fix != "" {
				fmt.Fprintf(&b, "         fix: %s\n", c.Fix)
			}
		}
	}
	if r.OK {
		b.WriteString("\nAll required checks passed.\n")
	} else {
		fmt.Fprintf(&b, "\n%d required check(s) failed.\n", len(r.Failures()))
	}
	return b.String()
}

// Executable checks that one of names is on PATH (the first found wins).
func Executable(check string, fix string, names ...string) Check {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return Check{Name: check, OK: true, Message: p}
		}
	}
	return Check{Name: check, Message: strings.Join(names, " or ") + " not found on PATH", Fix: fix}
}

// Programs is the optional source checking the programs agents' tools use
// when present: fd (file search), git and npx (MCP servers).
func Programs() Source {
	return Source{Kind: Optional, Name: "programs", Run: func(context.Context) []Check {
		return []Check{
			FileSearch(),
			Executable("git", "apt-get install -y git", "git"),
			Executable("npx (MCP servers run with npx)", "apt-get install -y nodejs npm", "npx"),
		}
	}}
}

// FileSearch checks for fd (Debian and Ubuntu call it fdfind), the preferred
// file search program; with only the traditional find it warns of the
// slower fallback.
func FileSearch() Check {
	c := Executable("file search", "apt-get install -y fd-find", "fd", "fdfind")
	if c.OK {
		return c
	}
	if p, err := exec.LookPath("find"); err == nil {
		c.Message = "fd/fdfind not found; falling back to " + p + ", which is slower and ignores .gitignore"
	}
	return c
}

// WritableDir checks that dir accepts files; a folder that does not exist yet
// passes when the nearest existing parent accepts them (it is created on
// start). Nothing is left behind.
func WritableDir(check, dir string) Check {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	fix := "make " + abs + " writable for this user, or choose another folder with --state"
	probe, note := abs, " is writable"
	for {
		fi, err := os.Stat(probe)
		if err == nil {
			if !fi.IsDir() {
				return Check{Name: check, Message: probe + " is not a folder", Fix: fix}
			}
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			return Check{Name: check, Message: "no existing parent folder of " + abs, Fix: fix}
		}
		probe, note = parent, " does not exist yet and can be created"
	}
	f, err := os.CreateTemp(probe, ".health-")
	if err != nil {
		return Check{Name: check, Message: fmt.Sprintf("cannot write in %s: %v", probe, err), Fix: fix}
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return Check{Name: check, OK: true, Message: abs + note}
}
