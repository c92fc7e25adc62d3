package fs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// Option configures the file tools.
type Option func(*Paths)

// AllowPaths lets the tools read readOnly and read and write readWrite
// (folders or single files, absolute) besides the workspace: the Agent's
// spec.tools.fs.allowedPaths.
func AllowPaths(readOnly, readWrite []string) Option {
	return func(p *Paths) {
		for _, d := range readOnly {
			p.areas = append(p.areas, area{dir: filepath.Clean(d)})
		}
		for _, d := range readWrite {
			p.areas = append(p.areas, area{dir: filepath.Clean(d), write: true})
		}
	}
}

// Allowed lists the paths opts open besides the workspace, read-only and
// read-write, so a copy of the tools elsewhere (the sandbox container's)
// reaches the same places.
func Allowed(opts ...Option) (readOnly, readWrite []string) {
	for _, a := range newPaths(opts).areas {
		if a.write {
			readWrite = append(readWrite, a.dir)
		} else {
			readOnly = append(readOnly, a.dir)
		}
	}
	return readOnly, readWrite
}

// Paths is where the file tools may reach: the session's workspace, and
// what the Agent opted in to. Every open goes through an os.Root of the area,
// so neither "..", nor an absolute path, nor a symlink (one bash created,
// say) leads out of it: the kernel resolves the path beneath the root.
type Paths struct {
	areas []area
}

// area is one place the tools may reach.
type area struct {
	dir   string
	write bool
}

func newPaths(opts []Option) *Paths {
	p := &Paths{}
	for _, o := range opts {
		o(p)
	}
	return p
}

// place is a resolved path: rel (an OS path, "." for the area itself)
// beneath root.
type place struct {
	root *os.Root
	rel  string
	// file is set when the area is a single file: rel is its name and
	// nothing else beneath root may be used.
	file bool
}

// Close releases the root.
func (pl place) Close() { _ = pl.root.Close() }

// fsPath is rel as an io/fs path.
func (pl place) fsPath() string { return filepath.ToSlash(pl.rel) }

// locate resolves the path argument p (shown to the model as shown) for
// reading or, with write, writing; ok is false with a result for the model
// when p is outside every area or the area is read-only.
func (ps *Paths) locate(env tool.Env, p, shown string, write bool) (pl place, res tool.Result, ok bool) {
	abs := env.Resolve(p)
	if abs == "" {
		return place{}, tool.Errorf("error: no workspace is set for this session."), false
	}
	areas := ps.areas
	if env.Workspace != "" {
		areas = append([]area{{dir: filepath.Clean(env.Workspace), write: true}}, areas...)
	}
	best := -1
	for i, a := range areas {
		if within(abs, a.dir) && (best < 0 || len(a.dir) > len(areas[best].dir)) {
			best = i
		}
	}
	if best < 0 {
		return place{}, tool.Errorf("error: %s is outside the workspace. The file tools work inside the workspace%s; use a path relative to it.",
			shown, ps.allowedText()), false
	}
	a := areas[best]
	if write && !a.write {
		return place{}, tool.Errorf("error: %s is in %s, which this agent may only read.", shown, a.dir), false
	}
	dir, rel := a.dir, "."
	if r, err := filepath.Rel(a.dir, abs); err == nil {
		rel = r
	}
	fi, err := os.Stat(a.dir)
	isFile := err == nil && !fi.IsDir()
	if isFile {
		dir, rel = filepath.Dir(a.dir), filepath.Base(a.dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if r, known := missingOrDenied(err, shown); known {
			return place{}, r, false
		}
		return place{}, tool.Errorf("error: cannot open %s: %v", dir, err), false
	}
	return place{root: root, rel: rel, file: isFile}, tool.Result{}, true
}

// writable resolves the path argument p for a write, following its
// symlinks within the area: rel is the name to replace beneath pl's root,
// which the caller closes.
func (ps *Paths) writable(env tool.Env, p string) (pl place, rel string, res tool.Result, ok bool) {
	pl, res, ok = ps.locate(env, p, p, true)
	if !ok {
		return place{}, "", res, false
	}
	rel, res, ok = pl.writeTarget(p)
	if !ok {
		pl.Close()
		return place{}, "", res, false
	}
	return pl, rel, tool.Result{}, true
}

// allowedText lists the opted-in areas for an error message.
func (ps *Paths) allowedText() string {
	if len(ps.areas) == 0 {
		return ""
	}
	var names []string
	for _, a := range ps.areas {
		mode := "read-only"
		if a.write {
			mode = "read-write"
		}
		names = append(names, a.dir+" ("+mode+")")
	}
	slices.Sort(names)
	return " and in " + strings.Join(names, ", ")
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// maxLinks bounds the symlinks writeTarget follows.
const maxLinks = 40

// writeTarget returns the name a write to pl must replace: the target of a
// symlink (so writing through a link updates what it points to instead of
// replacing the link with a regular file), or pl.rel itself. A link that
// leads out of the root is refused; the write itself is confined by the root
// whatever happens to the link meanwhile.
func (pl place) writeTarget(shown string) (string, tool.Result, bool) {
	rel := pl.rel
	for range maxLinks {
		fi, err := pl.root.Lstat(rel)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return rel, tool.Result{}, true
		}
		target, err := pl.root.Readlink(rel)
		if err != nil {
			return rel, tool.Result{}, true
		}
		if filepath.IsAbs(target) {
			r, err := filepath.Rel(pl.root.Name(), target)
			if err != nil || !within(target, pl.root.Name()) {
				return "", escapes(shown), false
			}
			rel = r
		} else {
			rel = filepath.Join(filepath.Dir(rel), target)
			if !filepath.IsLocal(rel) {
				return "", escapes(shown), false
			}
		}
	}
	return "", tool.Errorf("error: %s is a chain of more than %d symbolic links.", shown, maxLinks), false
}

func escapes(shown string) tool.Result {
	return tool.Errorf("error: %s is a symbolic link that leads outside the workspace; the file tools do not follow it.", shown)
}

// escaped reports whether err is os.Root refusing a path that leads out of
// it.
func escaped(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && strings.Contains(pe.Err.Error(), "path escapes from parent")
}

// openError turns an error of an open beneath the root into a message for
// the model; ok is false for other errors.
func openError(err error, shown string) (tool.Result, bool) {
	if escaped(err) {
		return escapes(shown), true
	}
	return missingOrDenied(err, shown)
}

// errorf wraps an unexpected error with the path.
func errorf(verb, shown string, err error) error {
	return fmt.Errorf("failed to %s %q: %w", verb, shown, err)
}
