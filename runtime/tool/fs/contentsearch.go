package fs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	// defaultMatchLimit is how many matching lines content_search returns
	// when not told.
	defaultMatchLimit = 100
	// maxMatchLineChars cuts long matching lines (minified code, data files).
	maxMatchLineChars = 300
	// maxSearchFileSize skips files too large to be source or prose.
	maxSearchFileSize = 10 << 20
)

// ContentSearchArgs are the arguments of content_search.
type ContentSearchArgs struct {
	Pattern         string `json:"pattern" jsonschema:"Regular expression in Go RE2 syntax, matched against each line"`
	Path            string `json:"path,omitempty" jsonschema:"File or folder to search (default: the workspace)"`
	Glob            string `json:"glob,omitempty" jsonschema:"Only search files matching this glob, e.g. *.go or src/**/*.ts (folders only)"`
	CaseInsensitive bool   `json:"case_insensitive,omitempty" jsonschema:"Ignore letter case"`
	Limit           int    `json:"limit,omitempty" jsonschema:"Maximum number of matching lines to return (default 100)"`
}

// NewContentSearch returns content_search, a grep over the workspace, so the
// model finds definitions and usages without reading every file.
func NewContentSearch(opts ...Option) tool.Tool {
	return tool.New("content_search",
		"Search file contents with a regular expression (Go RE2). Returns path:line: text for matching lines; skips binary files, files over 10 MiB, .git and node_modules.",
		newPaths(opts).searchContent,
		tool.ReadOnly(),
		tool.Range("limit", tool.Bound(1), tool.Bound(5_000)),
	)
}

// lineMatcher finds matching lines in file contents.
type lineMatcher struct {
	re *regexp.Regexp
	// whole, when set, is re in multi-line mode: one run over a whole file
	// rules it out when it has no matching line, which is far cheaper than a
	// run per line. It is nil when that shortcut could miss a match.
	whole *regexp.Regexp
	// endLine is set when the pattern uses $, which the whole-file run does
	// not match before "\r\n"; files with CR skip the shortcut.
	endLine bool
}

// newLineMatcher compiles expr for line matching.
func newLineMatcher(expr string) (lineMatcher, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return lineMatcher{}, err
	}
	lm := lineMatcher{re: re}
	// A line match is a match in the whole file under (?m), except for \A
	// and \z (start and end of a line, but not of a file) and $ before a CR.
	multi := "(?m)" + expr
	if tree, err := syntax.Parse(multi, syntax.Perl); err == nil {
		textAnchor := false
		walkRegexp(tree, func(r *syntax.Regexp) {
			switch r.Op {
			case syntax.OpBeginText, syntax.OpEndText:
				textAnchor = true
			case syntax.OpEndLine:
				lm.endLine = true
			}
		})
		if whole, err := regexp.Compile(multi); err == nil && !textAnchor {
			lm.whole = whole
		}
	}
	return lm, nil
}

// walkRegexp calls fn for every node of a parsed regular expression.
func walkRegexp(r *syntax.Regexp, fn func(*syntax.Regexp)) {
	fn(r)
	for _, s := range r.Sub {
		walkRegexp(s, fn)
	}
}

// mayMatch reports whether data can hold a matching line.
func (lm lineMatcher) mayMatch(data []byte) bool {
	if lm.whole == nil || lm.endLine && bytes.IndexByte(data, '\r') >= 0 {
		return true
	}
	return lm.whole.Match(data)
}

func (ps *Paths) searchContent(ctx context.Context, env tool.Env, a ContentSearchArgs) (tool.Result, error) {
	if a.Pattern == "" {
		return tool.Errorf("error: pattern is empty. Pass a regular expression to search for."), nil
	}
	expr := a.Pattern
	if a.CaseInsensitive {
		expr = "(?i)" + expr
	}
	lm, err := newLineMatcher(expr)
	if err != nil {
		return tool.Errorf("error: invalid regular expression %q: %v. Use Go RE2 syntax (no lookaround or backreferences) and escape literal characters such as ( [ . * + ? with a backslash.", a.Pattern, err), nil
	}
	var glob *globMatcher
	if a.Glob != "" {
		g, err := newGlobMatcher(a.Glob)
		if err != nil {
			return tool.Errorf("error: %v.", err), nil
		}
		glob = &g
	}
	limit := a.Limit
	if limit <= 0 {
		limit = defaultMatchLimit
	}

	shown := a.Path
	if shown == "" {
		shown = "the workspace"
	}
	pl, res, ok := ps.locate(env, a.Path, shown, false)
	if !ok {
		return res, nil
	}
	defer pl.Close()
	fi, err := pl.root.Stat(pl.rel)
	if err != nil {
		if res, ok := openError(err, shown); ok {
			return res, nil
		}
		return tool.Result{}, errorf("stat", shown, err)
	}

	// Collect one match more than asked for, to know whether the limit cut
	// results.
	var out []string
	if !fi.IsDir() {
		matches, res, ok := lm.searchFile(pl, shown, fi, limit+1)
		if !ok {
			return res, nil
		}
		out = matches
	} else {
		var files []string
		err := walkFiles(ctx, pl, func(rel string, _ fs.DirEntry) {
			if glob == nil || glob.match(rel) {
				files = append(files, rel)
			}
		})
		if err != nil {
			return tool.Result{}, err
		}
		slices.Sort(files)
		if out, err = lm.searchFiles(ctx, pl, files, limit+1); err != nil {
			return tool.Result{}, err
		}
	}
	truncated := len(out) > limit
	out = out[:min(len(out), limit)]
	if len(out) == 0 {
		return tool.Text(fmt.Sprintf("No matches for %q in %s.", a.Pattern, shown)), nil
	}
	text := strings.Join(out, "\n")
	if truncated {
		text += fmt.Sprintf("\n\n[Stopped at %d matches. Narrow the pattern, path or glob, or raise limit.]", limit)
	}
	return tool.Text(text), nil
}

// searchFile searches the single file the model named, saying why it cannot
// be searched instead of skipping it silently.
func (lm lineMatcher) searchFile(pl place, shown string, fi os.FileInfo, limit int) ([]string, tool.Result, bool) {
	switch {
	case !fi.Mode().IsRegular():
		return nil, tool.Errorf("error: %s is not a regular file (it is a device, pipe or socket).", shown), false
	case fi.Size() > maxSearchFileSize:
		return nil, tool.Errorf("error: %s is larger than 10 MiB; content_search skips such files. Read parts of it with file_read instead.", shown), false
	}
	data, err := pl.root.ReadFile(pl.rel)
	if err != nil {
		if res, ok := openError(err, shown); ok {
			return nil, res, false
		}
		return nil, tool.Errorf("error: cannot read %s: %v", shown, err), false
	}
	if isBinary(data) {
		return nil, tool.Errorf("error: %s looks like a binary file (it contains NUL bytes); content_search only searches text.", shown), false
	}
	return lm.appendMatches(nil, filepath.Base(pl.rel), data, limit), tool.Result{}, true
}

// searchBatch is how many files are searched concurrently before their
// results are collected in order; it bounds the work done past the limit.
const searchBatch = 128

// searchFiles returns up to limit matches from files (relative to root), in
// the order of files. Files are read and matched on all CPUs, batch by batch,
// so the output stays deterministic and the search stops soon after the
// limit.
func (lm lineMatcher) searchFiles(ctx context.Context, pl place, files []string, limit int) ([]string, error) {
	var out []string
	workers := runtime.GOMAXPROCS(0)
	for start := 0; start < len(files) && len(out) < limit; start += searchBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		chunk := files[start:min(start+searchBatch, len(files))]
		found := make([][]string, len(chunk))
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(workers, len(chunk)) {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(chunk); i = int(next.Add(1) - 1) {
					if data, ok := readSearchable(pl.root, filepath.Join(pl.rel, filepath.FromSlash(chunk[i]))); ok {
						found[i] = lm.appendMatches(nil, chunk[i], data, limit)
					}
				}
			})
		}
		wg.Wait()
		for _, f := range found {
			out = append(out, f...)
		}
	}
	return out[:min(len(out), limit)], nil
}

// readSearchable returns the content of a file worth searching: a regular
// file (or link to one) of at most maxSearchFileSize that is not binary.
func readSearchable(root *os.Root, rel string) ([]byte, bool) {
	fi, err := root.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxSearchFileSize {
		return nil, false
	}
	data, err := root.ReadFile(rel)
	if err != nil || isBinary(data) {
		return nil, false
	}
	return data, true
}

// appendMatches appends "rel:line: text" entries for the matching lines of
// data to out until out holds limit entries.
func (lm lineMatcher) appendMatches(out []string, rel string, data []byte, limit int) []string {
	if !lm.mayMatch(data) {
		return out
	}
	for lineNo := 1; len(data) > 0 && len(out) < limit; lineNo++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if !lm.re.Match(line) {
			continue
		}
		text := string(line)
		if cut := truncateRunes(text, maxMatchLineChars); len(cut) < len(text) {
			text = cut + "…"
		}
		out = append(out, fmt.Sprintf("%s:%d: %s", rel, lineNo, text))
	}
	return out
}
