package helm

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	cmd   string   // upper case: FROM, RUN, COPY, …
	flags []string // leading --flags, e.g. --from=build, --mount=type=cache,…
	args  string   // the rest
	line  int      // where it starts
}

// dockerStage is a FROM and the instructions up to the next one.
type dockerStage struct {
	name, base   string
	instructions []dockerInstruction
}

// dockerfile is a parsed Dockerfile: the ARGs before the first FROM and the stages.
type dockerfile struct {
	globalArgs map[string]string
	stages     []dockerStage
}

// parseDockerfile reads the Dockerfile syntax the images use: comments,
// line continuations, leading flags, FROM … AS name, and ARG defaults. It
// does not expand variables other than in FROM.
func parseDockerfile(text string) (*dockerfile, error) {
	df := &dockerfile{globalArgs: map[string]string{}}
	var cur strings.Builder
	start := 0
	flush := func() error {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return nil
		}
		cmd, rest, _ := strings.Cut(s, " ")
		in := dockerInstruction{cmd: strings.ToUpper(cmd), line: start}
		rest = strings.TrimSpace(rest)
		for strings.HasPrefix(rest, "--") {
			var flag string
			flag, rest, _ = strings.Cut(rest, " ")
			in.flags = append(in.flags, flag)
			rest = strings.TrimSpace(rest)
		}
		in.args = rest
		switch {
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			if len(fields) != 1 && (len(fields) != 3 || !strings.EqualFold(fields[1], "AS")) {
				return fmt.Errorf("line %d: FROM %q is not 'image [AS name]'", start, in.args)
			}
			st := dockerStage{base: expandArgs(fields[0], df.globalArgs)}
			if len(fields) == 3 {
				st.name = fields[2]
			}
			df.stages = append(df.stages, st)
		case len(df.stages) == 0:
			if in.cmd != "ARG" {
				return fmt.Errorf("line %d: %s before the first FROM", start, in.cmd)
			}
			for _, a := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(a, "=")
				df.globalArgs[k] = v
			}
		default:
			last := &df.stages[len(df.stages)-1]
			last.instructions = append(last.instructions, in)
		}
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() > 0) {
			continue // comments (also inside continuations) and blank continuation lines
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: the last instruction ends in a continuation", start)
	}
	if len(df.stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return df, nil
}

// expandArgs replaces ${NAME} and $NAME by the ARG defaults.
func expandArgs(s string, args map[string]string) string {
	return os.Expand(s, func(k string) string { return args[k] })
}

// stage returns the stage with the name, or nil.
func (d *dockerfile) stage(name string) *dockerStage {
	for i := range d.stages {
		if d.stages[i].name == name {
			return &d.stages[i]
		}
	}
	return nil
}

// final is the stage the image is made of: the last one.
func (d *dockerfile) final() *dockerStage { return &d.stages[len(d.stages)-1] }

// flag returns the value of --name=value, or "".
func (in dockerInstruction) flag(name string) string {
	for _, f := range in.flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// execForm parses a JSON-array (exec form) argument such as ENTRYPOINT's.
func (in dockerInstruction) execForm() ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		return nil, fmt.Errorf("line %d: %s is not in exec form (a JSON array): %w", in.line, in.cmd, err)
	}
	return v, nil
}

// ignoreMatcher applies .dockerignore patterns the way BuildKit does for the
// forms used here: paths relative to the context root, filepath.Match
// wildcards, a leading "**/" for any depth, and a matched folder excluding
// everything below it.
type ignoreMatcher []string

func readIgnore(file string) (ignoreMatcher, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", file, err)
	}
	var m ignoreMatcher
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf("%s: exceptions (%q) are not supported by this test", file, line)
		}
		m = append(m, path.Clean(line))
	}
	return m, nil
}

func (m ignoreMatcher) ignored(rel string) bool {
	for _, p := range m {
		if sub, anyDepth := strings.CutPrefix(p, "**/"); anyDepth {
			parts := strings.Split(rel, "/")
			for i := range parts {
				if ok, _ := path.Match(sub, strings.Join(parts[i:], "/")); ok {
					return true
				}
			}
			continue
		}
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
	}
	return false
}

// copyContext copies the build context (the repository) to dst, leaving out
// what the ignore file excludes: what `docker build` would send.
func copyContext(src, dst string, ignore ignoreMatcher) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.ignored(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil // sockets, symlinks: not part of a source tree
		}
		return copyFile(p, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func TestParseDockerfile(t *testing.T) {
	g := NewWithT(t)
	df, err := parseDockerfile(`# syntax=docker/dockerfile:1
ARG GO_VERSION=1.26
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
RUN --mount=type=cache,target=/go/pkg/mod \
    # a comment inside a continuation
    go build -o /out/a ./a && \

    go build -o /out/b ./b
FROM scratch
COPY --from=build /out/a /a
ENTRYPOINT ["/a", "serve"]
`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(df.globalArgs).To(Equal(map[string]string{"GO_VERSION": "1.26"}))
	g.Expect(df.stages).To(HaveLen(2))
	build := df.stage("build")
	g.Expect(build.base).To(Equal("golang:1.26-bookworm"))
	g.Expect(build.instructions).To(HaveLen(2))
	run := build.instructions[1]
	g.Expect(run.cmd).To(Equal("RUN"))
	g.Expect(run.flag("mount")).To(Equal("type=cache,target=/go/pkg/mod"))
	g.Expect(run.args).To(Equal("go build -o /out/a ./a &&  go build -o /out/b ./b"))
	g.Expect(run.line).To(Equal(5))
	g.Expect(df.final().instructions[0].flag("from")).To(Equal("build"))
	ep, err := df.final().instructions[1].execForm()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ep).To(Equal([]string{"/a", "serve"}))

	for _, bad := range []string{"RUN true\n", "FROM a b\n", "FROM a\nRUN x \\\n"} {
		_, err := parseDockerfile(bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}

	ig := ignoreMatcher{".git", "*.test", "**/testdata", "bin"}
	g.Expect(ig.ignored("openai.test")).To(BeTrue())
	g.Expect(ig.ignored("runtime/x.test")).To(BeFalse(), "patterns are anchored at the context root")
	g.Expect(ig.ignored("runtime/manifest/testdata")).To(BeTrue())
	g.Expect(ig.ignored("testdata")).To(BeTrue())
	g.Expect(ig.ignored("bin")).To(BeTrue())
	g.Expect(ig.ignored("runtime/bin.go")).To(BeFalse())
}
