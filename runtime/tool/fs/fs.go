// Package fs holds the file tools the model uses to read, write, edit and
// search files: file_read, file_write, file_edit, file_search and
// content_search.
//
// Relative paths resolve against the session workspace (tool.Env.Resolve).
// The tools reach only the workspace and what the Agent opted in to
// (spec.tools.fs.allowedPaths, read-only or read-write): an absolute path
// elsewhere is refused, and every open goes through an os.Root, so no "..",
// symlink or race leads out. This departs from the reference, where absolute
// paths are accepted: that behaviour is the opt-in. In a cluster-mode
// session pod the tools run in the sandbox container instead of the
// runtime (execserver.Sandboxed), where the kernel, for a user without
// credentials, is the boundary and these checks only explain refusals.
package fs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	// sniffLen is how much of a file is inspected for NUL bytes to decide that
	// it is binary (the heuristic git and grep use).
	sniffLen = 8 << 10
	// newFilePerm is the mode of files the tools create.
	newFilePerm os.FileMode = 0o644
	// newDirPerm is the mode of folders the tools create.
	newDirPerm os.FileMode = 0o755
)

// skippedDirs are folders the search tools never descend into: they are large,
// generated, and almost never what the model is looking for.
var skippedDirs = map[string]bool{".git": true, "node_modules": true}

// Tools returns the five file tools, so a caller registers them together.
func Tools(opts ...Option) []tool.Tool {
	return []tool.Tool{NewFileRead(opts...), NewFileWrite(opts...), NewFileEdit(opts...), NewFileSearch(opts...), NewContentSearch(opts...)}
}

// isBinary reports whether head, the start of a file, looks binary.
func isBinary(head []byte) bool {
	if len(head) > sniffLen {
		head = head[:sniffLen]
	}
	return bytes.IndexByte(head, 0) >= 0
}

// writeAtomic replaces rel beneath root with data through a temporary file
// in the same folder and a rename, so readers never see a half-written file
// and a failed write leaves the old content in place.
func writeAtomic(root *os.Root, rel string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(rel)
	var name string
	var tmp *os.File
	for i := 0; ; i++ {
		name = filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d-%d", base, os.Getpid(), rand.Uint32()))
		tmp, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil || !errors.Is(err, os.ErrExist) || i == 10 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("failed to create temporary file in %q: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = root.Remove(name)
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("failed to write temporary file %q: %w", name, err)
	}
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("failed to set mode of temporary file %q: %w", name, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("failed to sync temporary file %q: %w", name, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("failed to close temporary file %q: %w", name, err)
	}
	if err = root.Rename(name, rel); err != nil {
		return fmt.Errorf("failed to rename %q to %q: %w", name, rel, err)
	}
	return nil
}

// missingOrDenied turns the common open errors into a message for the model;
// ok is false for other errors, which the caller reports as failures.
func missingOrDenied(err error, shown string) (res tool.Result, ok bool) {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return tool.Errorf("error: %s does not exist. Check the path, or find the file with file_search.", shown), true
	case errors.Is(err, os.ErrPermission):
		return tool.Errorf("error: permission denied for %s. Choose a file you are allowed to access.", shown), true
	}
	return tool.Result{}, false
}

// regularFile checks that pl (shown to the model as shown) is a regular file,
// turning the usual problems into messages that say what to do instead.
// Devices and pipes are refused because reading them may never end.
func regularFile(pl place, shown string) (tool.Result, bool) {
	fi, err := pl.root.Stat(pl.rel)
	switch {
	case err != nil:
		if res, ok := openError(err, shown); ok {
			return res, false
		}
		return tool.Errorf("error: cannot access %s: %v", shown, err), false
	case fi.IsDir():
		return tool.Errorf("error: %s is a folder, not a file. List its files with file_search (pattern \"*\", path %q).", shown, shown), false
	case !fi.Mode().IsRegular():
		return tool.Errorf("error: %s is not a regular file (it is a device, pipe or socket).", shown), false
	}
	return tool.Result{}, true
}

// globMatcher matches a glob against a file: a pattern with a slash is matched
// against the path relative to the search folder, one without against the file
// name at any depth (as find -name and fd do), which is what models expect
// from "*.go".
type globMatcher struct {
	pattern string
	byName  bool
}

// newGlobMatcher validates pattern.
func newGlobMatcher(pattern string) (globMatcher, error) {
	p := strings.TrimPrefix(filepath.ToSlash(strings.TrimSpace(pattern)), "./")
	if p == "" {
		return globMatcher{}, errors.New("the glob pattern is empty")
	}
	if strings.HasPrefix(p, "/") {
		return globMatcher{}, fmt.Errorf("the glob pattern %q is absolute; put the folder in path and keep the pattern relative (for example \"**/*.go\")", pattern)
	}
	if !doublestar.ValidatePattern(p) {
		return globMatcher{}, fmt.Errorf("the glob pattern %q is invalid (check brackets and braces)", pattern)
	}
	return globMatcher{pattern: p, byName: !strings.Contains(p, "/")}, nil
}

// match reports whether the file at rel (slash-separated, relative to the
// search folder) matches.
func (m globMatcher) match(rel string) bool {
	name := rel
	if m.byName {
		name = rel[strings.LastIndexByte(rel, '/')+1:]
	}
	return doublestar.MatchUnvalidated(m.pattern, name)
}

// folderArg resolves a folder argument and checks that it is a folder; the
// caller closes the place.
func (ps *Paths) folderArg(env tool.Env, p string) (pl place, res tool.Result, ok bool) {
	shown := p
	if shown == "" {
		shown = "the workspace"
	}
	pl, res, ok = ps.locate(env, p, shown, false)
	if !ok {
		return place{}, res, false
	}
	fi, err := pl.root.Stat(pl.rel)
	switch {
	case err != nil:
		pl.Close()
		if r, known := openError(err, shown); known {
			return place{}, r, false
		}
		return place{}, tool.Errorf("error: cannot access %s: %v", shown, err), false
	case !fi.IsDir():
		pl.Close()
		return place{}, tool.Errorf("error: %s is a file, not a folder. Pass a folder as path, or read the file with file_read.", shown), false
	}
	return pl, tool.Result{}, true
}
