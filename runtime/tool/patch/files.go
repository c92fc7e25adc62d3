package patch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// fileSystem is the file access apply_patch needs. Names are absolute. The
// rooted implementation confines every access to the workspace at the moment
// of the call, closing the gap between the checks made while planning and the
// writes (a symlink swapped in between still cannot lead outside).
type fileSystem interface {
	Stat(name string) (os.FileInfo, error)
	ReadFile(name string) ([]byte, error)
	Mkdir(name string, perm os.FileMode) error
	OpenFile(name string, flag int, perm os.FileMode) (*os.File, error)
	Chmod(name string, mode os.FileMode) error
	Rename(oldname, newname string) error
	Remove(name string) error
}

// hostFS is the unrestricted file system, used with AllowOutsideWorkspace.
type hostFS struct{}

func (hostFS) Stat(name string) (os.FileInfo, error)     { return os.Stat(name) }
func (hostFS) ReadFile(name string) ([]byte, error)      { return os.ReadFile(name) }
func (hostFS) Mkdir(name string, perm os.FileMode) error { return os.Mkdir(name, perm) }
func (hostFS) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
func (hostFS) Chmod(name string, mode os.FileMode) error { return os.Chmod(name, mode) }
func (hostFS) Rename(oldname, newname string) error      { return os.Rename(oldname, newname) }
func (hostFS) Remove(name string) error                  { return os.Remove(name) }

// rootedFS resolves names inside an os.Root opened on the workspace.
type rootedFS struct {
	root *os.Root
	// bases are the workspace path as configured and with symlinks resolved;
	// names may be below either (symlink targets are resolved paths).
	bases []string
}

func (r rootedFS) rel(name string) (string, error) {
	for _, b := range r.bases {
		if rel, err := filepath.Rel(b, name); err == nil && isLocal(rel) {
			return rel, nil
		}
	}
	return "", fmt.Errorf("failed to access %q: path is outside the workspace", name)
}

func (r rootedFS) Stat(name string) (os.FileInfo, error) {
	rel, err := r.rel(name)
	if err != nil {
		return nil, err
	}
	return r.root.Stat(rel)
}

func (r rootedFS) ReadFile(name string) ([]byte, error) {
	rel, err := r.rel(name)
	if err != nil {
		return nil, err
	}
	return r.root.ReadFile(rel)
}

func (r rootedFS) Mkdir(name string, perm os.FileMode) error {
	rel, err := r.rel(name)
	if err != nil {
		return err
	}
	return r.root.Mkdir(rel, perm)
}

func (r rootedFS) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	rel, err := r.rel(name)
	if err != nil {
		return nil, err
	}
	return r.root.OpenFile(rel, flag, perm)
}

func (r rootedFS) Chmod(name string, mode os.FileMode) error {
	rel, err := r.rel(name)
	if err != nil {
		return err
	}
	return r.root.Chmod(rel, mode)
}

func (r rootedFS) Rename(oldname, newname string) error {
	oldRel, err := r.rel(oldname)
	if err != nil {
		return err
	}
	newRel, err := r.rel(newname)
	if err != nil {
		return err
	}
	return r.root.Rename(oldRel, newRel)
}

func (r rootedFS) Remove(name string) error {
	rel, err := r.rel(name)
	if err != nil {
		return err
	}
	return r.root.Remove(rel)
}

// isLocal reports whether a relative path stays below its base.
func isLocal(rel string) bool {
	return rel == "." || filepath.IsLocal(rel)
}

// within reports whether p is root or below it, lexically.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && isLocal(rel)
}

// errOutside marks a path that leads out of the workspace.
var errOutside = errors.New("outside the workspace")

// checkInside returns an error wrapping errOutside when abs lies outside the
// workspace ws, either lexically (../x, /etc/x) or really: the deepest part of
// abs that exists is resolved through symlinks, so a link inside the
// workspace that points elsewhere is caught before anything is written.
func checkInside(ws, abs string) error {
	if !within(ws, abs) {
		return errOutside
	}
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return fmt.Errorf("failed to resolve workspace %q: %w", ws, err)
	}
	p := abs
	for {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		// A dangling symlink: where it would lead cannot be checked.
		return fmt.Errorf("%w (%s is a symlink that cannot be resolved)", errOutside, strings.TrimPrefix(p, ws+string(filepath.Separator)))
	}
	if !within(realWS, resolved) {
		return fmt.Errorf("%w (through a symlink to %s)", errOutside, resolved)
	}
	return nil
}

// realPath resolves the symlinks in the part of p that exists and keeps the
// rest as written.
func realPath(p string) string {
	rest := ""
	for {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(resolved, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// writeStaged writes data to a new temporary file next to target and returns
// its name; renaming it over target later makes the write atomic.
func writeStaged(fsys fileSystem, target string, data []byte, perm os.FileMode) (string, error) {
	dir, base := filepath.Split(target)
	var (
		f   *os.File
		tmp string
		err error
	)
	for range 10 {
		tmp = filepath.Join(dir, fmt.Sprintf(".%s.patch-%08x", base, rand.Uint32()))
		if f, err = fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("failed to create temporary file for %q: %w", target, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Chmod(tmp, perm)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return "", fmt.Errorf("failed to write temporary file for %q: %w", target, err)
	}
	return tmp, nil
}

// mkdirAll creates dir and its missing parents and returns the folders it
// created, deepest last, so a rollback can remove them.
func mkdirAll(fsys fileSystem, dir string) ([]string, error) {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := fsys.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return nil, fmt.Errorf("failed to create folder %q: %q is a file", dir, p)
			}
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("failed to create folder %q: %w", dir, err)
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	var created []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return created, fmt.Errorf("failed to create folder %q: %w", missing[i], err)
		}
		created = append(created, missing[i])
	}
	return created, nil
}
