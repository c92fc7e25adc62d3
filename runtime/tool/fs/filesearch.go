package fs

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// defaultSearchLimit is how many paths file_search returns when not told.
const defaultSearchLimit = 200

// FileSearchArgs are the arguments of file_search.
type FileSearchArgs struct {
	Pattern string `json:"pattern" jsonschema:"Glob such as *.go, **/*_test.go or src/**/*.{ts,tsx}; a pattern without / matches file names at any depth"`
	Path    string `json:"path,omitempty" jsonschema:"Folder to search (default: the workspace)"`
	Limit   int    `json:"limit,omitempty" jsonschema:"Maximum number of paths to return (default 200)"`
}

// NewFileSearch returns file_search, which finds files by name so the model
// can locate what to read without listing folders one by one.
func NewFileSearch(opts ...Option) tool.Tool {
	return tool.New("file_search",
		"Find files by glob pattern (** matches any folders). Returns sorted paths relative to the searched folder; skips .git and node_modules.",
		newPaths(opts).searchFiles,
		tool.ReadOnly(),
		tool.Range("limit", tool.Bound(1), tool.Bound(10_000)),
	)
}

func (ps *Paths) searchFiles(ctx context.Context, env tool.Env, a FileSearchArgs) (tool.Result, error) {
	m, err := newGlobMatcher(a.Pattern)
	if err != nil {
		return tool.Errorf("error: %v.", err), nil
	}
	limit := a.Limit
	if limit <= 0 {
		limit = defaultSearchLimit
	}
	pl, res, ok := ps.folderArg(env, a.Path)
	if !ok {
		return res, nil
	}
	defer pl.Close()
	var found []string
	err = walkFiles(ctx, pl, func(rel string, _ fs.DirEntry) {
		if m.match(rel) {
			found = append(found, rel)
		}
	})
	if err != nil {
		return tool.Result{}, err
	}
	shown := a.Path
	if shown == "" {
		shown = "the workspace"
	}
	if len(found) == 0 {
		msg := fmt.Sprintf("No files match %q in %s.", a.Pattern, shown)
		if !m.byName {
			msg += " Patterns containing / match the whole relative path; start with **/ to match at any depth."
		}
		return tool.Text(msg), nil
	}
	slices.Sort(found)
	total := len(found)
	if total > limit {
		found = found[:limit]
	}
	out := strings.Join(found, "\n")
	if total > limit {
		out += fmt.Sprintf("\n\n[Showing the first %d of %d matches. Narrow the pattern or path, or raise limit.]", limit, total)
	}
	return tool.Text(out), nil
}

// walkFiles calls fn for every non-folder entry under the folder pl with its
// slash-separated path relative to it, skipping skippedDirs. Unreadable
// folders are skipped rather than failing the search. The walk reads through
// the root, so a symlinked folder never leads out of it.
func walkFiles(ctx context.Context, pl place, fn func(rel string, d fs.DirEntry)) error {
	n := 0
	start := pl.fsPath()
	return fs.WalkDir(pl.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if n++; n%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if p == start {
				return fmt.Errorf("failed to read folder %q: %w", start, err)
			}
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != start && skippedDirs[d.Name()] {
				return fs.SkipDir
			}
			return nil
		}
		rel := p
		if start != "." {
			rel = strings.TrimPrefix(p, start+"/")
		}
		fn(rel, d)
		return nil
	})
}
