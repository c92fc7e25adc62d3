package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
func NewFileSearch() tool.Tool {
	return tool.New("file_search",
		"Find files by glob pattern (** matches any folders). Returns sorted paths relative to the searched folder; skips .git and node_modules.",
		searchFiles,
		tool.ReadOnly(),
		tool.Range("limit", tool.Bound(1), tool.Bound(10_000)),
	)
}

func searchFiles(ctx context.Context, env tool.Env, a FileSearchArgs) (tool.Result, error) {
	m, err := newGlobMatcher(a.Pattern)
	if err != nil {
		return tool.Errorf("error: %v.", err), nil
	}
	limit := a.Limit
	if limit <= 0 {
		limit = defaultSearchLimit
	}
	root, res, ok := folderArg(env, a.Path)
	if !ok {
		return res, nil
	}
	var found []string
	err = walkFiles(ctx, root, func(rel string, _ os.DirEntry) {
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

// walkFiles calls fn for every non-folder entry under root with its
// slash-separated path relative to root, skipping skippedDirs. Unreadable
// folders are skipped rather than failing the search.
func walkFiles(ctx context.Context, root string, fn func(rel string, d os.DirEntry)) error {
	n := 0
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if n++; n%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if p == root {
				return fmt.Errorf("failed to read folder %q: %w", root, err)
			}
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != root && skippedDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if rel, err := filepath.Rel(root, p); err == nil {
			fn(filepath.ToSlash(rel), d)
		}
		return nil
	})
}
