package skill

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Bounds of the file list of a skill.
const (
	maxListedFiles = 100
	maxFileDepth   = 4
	maxFileNameLen = 256
)

// files are the other files of a skill besides SKILL.md.
type files interface {
	// list returns the files' names relative to the skill folder, sorted.
	list() []string
	// read returns a file's content; name is already validated.
	read(name string) ([]byte, error)
}

// validFileName rejects names that could leave the skill folder: absolute
// paths, "..", backslashes, empty elements.
func validFileName(name string) error {
	if name == "" || len(name) > maxFileNameLen || strings.Contains(name, "\\") || !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("file %q must be a relative path inside the skill folder, such as reference.md or scripts/run.sh", name)
	}
	return nil
}

// readSkillFile reads file of skill s for get_skill, with the checks every
// kind of skill shares.
func readSkillFile(s *Skill, file string) (string, error) {
	if err := validFileName(file); err != nil {
		return "", err
	}
	if s.files == nil {
		return "", fmt.Errorf("skill %s has no files besides its instructions", s.Name)
	}
	data, err := s.files.read(file)
	var large *tooLargeError
	if err == nil && len(data) > MaxFileBytes {
		err = &tooLargeError{size: int64(len(data))}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("skill %s has no file %q; its files: %s", s.Name, file, listOrNone(s.files.list()))
	case errors.As(err, &large):
		where := ""
		if s.Folder != "" {
			where = " from " + filepath.Join(s.Folder, filepath.FromSlash(file))
		}
		return "", fmt.Errorf("file %q of skill %s is %d bytes; get_skill returns files up to %d KiB: read it in parts with file_read%s", file, s.Name, large.size, MaxFileBytes>>10, where)
	case err != nil:
		return "", fmt.Errorf("failed to read file %q of skill %s: %w", file, s.Name, err)
	}
	if !utf8.Valid(data) {
		return "", fmt.Errorf("file %q of skill %s is not text; use it from the skill folder instead", file, s.Name)
	}
	return string(data), nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// fsFiles are the files of a skill folder in an fs.FS (the binary's
// built-ins, or a folder on disk opened as an os.Root so that symbolic links
// cannot lead out of it).
type fsFiles struct {
	open func() (fs.FS, func(), error)
}

func dirFiles(dir string) fsFiles {
	return fsFiles{open: func() (fs.FS, func(), error) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return nil, nil, err
		}
		return root.FS(), func() { _ = root.Close() }, nil
	}}
}

func embeddedFiles(fsys fs.FS) fsFiles {
	return fsFiles{open: func() (fs.FS, func(), error) { return fsys, func() {}, nil }}
}

func (f fsFiles) list() []string {
	fsys, done, err := f.open()
	if err != nil {
		return nil
	}
	defer done()
	var out []string
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= maxListedFiles {
			return fs.SkipDir
		}
		if p == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") || strings.Count(p, "/") >= maxFileDepth {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && p != SkillFile {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func (f fsFiles) read(name string) ([]byte, error) {
	fsys, done, err := f.open()
	if err != nil {
		return nil, err
	}
	defer done()
	info, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return nil, fmt.Errorf("%s is a folder: %w", name, fs.ErrNotExist)
	}
	if info.Size() > MaxFileBytes {
		return nil, &tooLargeError{size: info.Size()}
	}
	return fs.ReadFile(fsys, name)
}

// tooLargeError reports a file beyond MaxFileBytes without reading it.
type tooLargeError struct{ size int64 }

func (e *tooLargeError) Error() string { return fmt.Sprintf("file is %d bytes", e.size) }

// mapFiles are the other keys of a ConfigMap skill.
type mapFiles map[string]string

func (m mapFiles) list() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (m mapFiles) read(name string) ([]byte, error) {
	v, ok := m[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return []byte(v), nil
}
