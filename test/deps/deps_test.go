// Package deps tests the module's import rules: which packages may import
// which. It reads every package's imports with one `go list` call and fails
// once per forbidden import, naming the importing package and the import.
//
// Only non-test imports count (go list's .Imports and .Deps, never
// .TestImports): a _test package may import anything. Imports are those of
// this machine's GOOS/GOARCH and no build tags.
package deps

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// edge is a known violation: pkg imports dep (both relative to the module).
type edge struct{ pkg, dep string }

// rule is one import rule.
type rule struct {
	name string
	// applies says which packages the rule constrains.
	applies func(pkg string) bool
	// banned says which of this module's packages they may not import.
	banned func(dep string) bool
	// transitive checks .Deps (everything built into the package) instead of
	// .Imports (what its files import).
	transitive bool
	// optional rules may match no package (one for a package still to be
	// written); any other rule that matches none is a broken rule.
	optional bool
}

// under reports whether pkg is dir or a package below it.
func under(pkg string, dirs ...string) bool {
	for _, d := range dirs {
		if pkg == d || strings.HasPrefix(pkg, d+"/") {
			return true
		}
	}
	return false
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

// oneOf matches exactly the packages named, not those below them.
func oneOf(pkgs ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(pkgs, p) }
}

func anyOf(dirs ...string) func(string) bool {
	return func(p string) bool { return under(p, dirs...) }
}

// knownViolations are the imports that break a rule today, each with what
// it is imported for. They are tolerated until fixed, and the list can only
// shrink: a violation not on it fails the test, and so does an entry that is
// no longer a violation. It is empty: keep it so.
var knownViolations = map[edge]string{}

var rules = []rule{
	{
		name:    "api/ imports nothing of this module outside api/",
		applies: anyOf("api"),
		banned:  not(anyOf("api")),
	},
	{
		name:    "runtime/ imports nothing under operator/",
		applies: anyOf("runtime"),
		banned:  anyOf("operator"),
	},
	{
		name:    "runtime/gateway is imported only by runtime/gateway, runtime/embedded, runtime/cluster, runtime/cmd, cmd and test",
		applies: not(anyOf("runtime/gateway", "runtime/embedded", "runtime/cluster", "runtime/cmd", "cmd", "test")),
		banned:  anyOf("runtime/gateway"),
	},
	{
		name:    "runtime/agenthost is imported only by runtime/cmd, cmd, runtime/embedded, runtime/cluster and test",
		applies: not(anyOf("runtime/agenthost", "runtime/cmd", "cmd", "runtime/embedded", "runtime/cluster", "test")),
		banned:  anyOf("runtime/agenthost"),
	},
	{
		name:    "runtime/provider/ imports neither runtime/session nor runtime/bus",
		applies: anyOf("runtime/provider"),
		banned:  anyOf("runtime/session", "runtime/bus"),
	},
	{
		// The contracts between the components (turn events, the gateway
		// protocol and wire format, health checks) are leaves: every layer
		// may use them because they use no layer. runtime/tracing (span
		// names and helpers over OpenTelemetry, itself using only
		// runtime/llm) is as much a leaf: the bus carries trace context.
		name:       "runtime/turn, runtime/protocol and runtime/health depend only on runtime/llm, runtime/tool, runtime/bus, runtime/tracing and each other",
		applies:    oneOf("runtime/turn", "runtime/protocol", "runtime/health"),
		banned:     not(oneOf("runtime/turn", "runtime/protocol", "runtime/health", "runtime/llm", "runtime/tool", "runtime/bus", "runtime/tracing")),
		transitive: true,
	},
	{
		name:       "runtime/sessionrt depends on neither runtime/embedded nor runtime/cluster",
		applies:    anyOf("runtime/sessionrt"),
		banned:     anyOf("runtime/embedded", "runtime/cluster"),
		transitive: true,
		optional:   true,
	},
}

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

func TestImportRules(t *testing.T) {
	root, module := findModule(t)
	pkgs := list(t, root)

	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	byPath := map[string]*pkg{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}

	seen := map[edge]bool{}
	for _, r := range rules {
		matched := false
		for _, p := range pkgs {
			from, ok := rel(p.ImportPath)
			if !ok || !r.applies(from) {
				continue
			}
			matched = true
			deps := p.Imports
			if r.transitive {
				deps = p.Deps
			}
			for _, d := range deps {
				to, ok := rel(d)
				if !ok || !r.banned(to) {
					continue
				}
				e := edge{from, to}
				if _, ok := knownViolations[e]; ok {
					seen[e] = true
					continue
				}
				if r.transitive {
					t.Errorf("rule %q: %s depends on %s (%s)", r.name, from, to, via(p, d, byPath, rel))
				} else {
					t.Errorf("rule %q: %s imports %s", r.name, from, to)
				}
			}
		}
		if !matched && !r.optional {
			t.Errorf("rule %q applies to no package of %s: the rule or the module path is wrong", r.name, module)
		}
	}
	for e, why := range knownViolations {
		if !seen[e] {
			t.Errorf("known violation %s imports %s (%s) is gone: remove it from knownViolations", e.pkg, e.dep, why)
		}
	}
}

// via names the path by which p comes to depend on dep: the chain of this
// module's packages from p's direct import down to dep.
func via(p *pkg, dep string, byPath map[string]*pkg, rel func(string) (string, bool)) string {
	chain := []string{}
	for cur := p; cur != nil; {
		next := ""
		for _, i := range cur.Imports {
			if i == dep {
				next = i
				break
			}
			if q := byPath[i]; q != nil && slices.Contains(q.Deps, dep) {
				next = i
				break
			}
		}
		if next == "" || next == dep {
			break
		}
		r, _ := rel(next)
		chain = append(chain, r)
		cur = byPath[next]
	}
	if len(chain) == 0 {
		return "imports it directly"
	}
	return "through " + strings.Join(chain, " -> ")
}

// findModule returns the module's directory and path: the nearest go.mod
// above the test's directory.
func findModule(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod has no module line", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// list runs go list once over the whole module.
func list(t *testing.T, root string) []*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []*pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := &pkg{}
		err := dec.Decode(p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			// Its imports may be incomplete, so the rules cannot be trusted.
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list found no package under %s", root)
	}
	return pkgs
}
