// Package patch implements apply_patch, the multi-file editing tool in the
// Codex/OpenAI patch format that OpenAI models are trained to write:
//
//	*** Begin Patch
//	*** Add File: path/new.txt
//	+line
//	*** Update File: path/a.go
//	*** Move to: path/b.go
//	@@ func header
//	 context
//	-removed
//	+added
//	*** Delete File: path/old.txt
//	*** End Patch
//
// A patch is all or nothing: every hunk of every file is checked against the
// current contents before anything is written, so a model that got one hunk
// wrong can resend the patch without first repairing a half-applied state.
package patch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/picobot/picobot/runtime/tool"
)

// Args are the arguments of apply_patch.
type Args struct {
	Input string `json:"input" jsonschema:"The whole patch, from '*** Begin Patch' to '*** End Patch'"`
}

// Option configures apply_patch.
type Option func(*config)

type config struct {
	workspaceOnly bool
}

// AllowOutsideWorkspace lets patches add, change and delete files outside the
// session workspace. Without it (the default, like OpenClaw's
// tools.exec.applyPatch.workspaceOnly) such paths are rejected, including
// ones that leave through ".." or a symlink.
func AllowOutsideWorkspace() Option {
	return func(c *config) { c.workspaceOnly = false }
}

const description = "Edit files with a patch: '*** Begin Patch', then sections '*** Add File: <path>' (every line prefixed with +), " +
	"'*** Delete File: <path>', or '*** Update File: <path>' (optionally '*** Move to: <path>') with '@@' hunks of ' ' context, '-' removed and '+' added lines; " +
	"end with '*** End Patch'. Nothing is written unless every hunk applies."

// New returns the apply_patch tool.
func New(opts ...Option) tool.Tool {
	c := config{workspaceOnly: true}
	for _, o := range opts {
		o(&c)
	}
	return tool.New("apply_patch", description, c.run)
}

// fileState tracks one path while a patch is planned: what the disk holds and
// what the patch has made of it so far.
type fileState struct {
	// abs is the path of the file's folder entry, with symlinks in its
	// folders resolved; a deletion removes it and new files are created there.
	abs   string
	shown string // the path as the patch wrote it
	// target is where an existing file's new content is written: the file a
	// symlink points to, so updating through a link keeps the link.
	target string

	origExists  bool
	origContent []byte
	origPerm    os.FileMode

	exists  bool
	content []byte
	perm    os.FileMode
}

// changed reports whether the file must be written.
func (s *fileState) changed() bool {
	return s.exists && (!s.origExists || s.perm != s.origPerm || !bytes.Equal(s.content, s.origContent))
}

// planner applies a patch to an in-memory view of the files it touches, so a
// patch can be validated completely before the disk is changed, and several
// sections may touch the same file.
type planner struct {
	env           tool.Env
	fsys          fileSystem
	workspaceOnly bool
	files         map[string]*fileState
	order         []*fileState // in first-touch order
	summary       []string     // "A path", "M path", "D path"
}

// planError is a problem with one file of the patch, reported to the model.
type planError struct {
	path string
	msg  string
	hint string
}

func (e *planError) Error() string { return e.path + ": " + e.msg }

func (c config) run(_ context.Context, env tool.Env, a Args) (tool.Result, error) {
	if strings.TrimSpace(a.Input) == "" {
		return tool.Errorf("error: input is empty. Pass the patch text, from '*** Begin Patch' to '*** End Patch'."), nil
	}
	ops, err := parse(a.Input)
	if err != nil {
		return tool.Errorf("error: invalid patch: %v. Nothing was changed; fix the patch and call apply_patch again.", err), nil
	}

	p := &planner{env: env, workspaceOnly: c.workspaceOnly, files: map[string]*fileState{}, fsys: hostFS{}}
	if c.workspaceOnly {
		if env.Workspace == "" {
			return tool.Errorf("error: this session has no workspace, and apply_patch only writes inside it."), nil
		}
		root, err := os.OpenRoot(env.Workspace)
		if err != nil {
			return tool.Result{}, fmt.Errorf("failed to open workspace %q: %w", env.Workspace, err)
		}
		defer func() { _ = root.Close() }()
		fsys := rootedFS{root: root, bases: []string{filepath.Clean(env.Workspace)}}
		if resolved, err := filepath.EvalSymlinks(env.Workspace); err == nil && resolved != fsys.bases[0] {
			fsys.bases = append(fsys.bases, resolved)
		}
		p.fsys = fsys
	}

	for _, op := range ops {
		if err := p.apply(op); err != nil {
			var pe *planError
			if errors.As(err, &pe) {
				msg := fmt.Sprintf("error: apply_patch failed; nothing was changed.\n%s: %s", pe.path, pe.msg)
				if pe.hint != "" {
					msg += "\n" + pe.hint
				}
				return tool.Errorf("%s", msg), nil
			}
			return tool.Result{}, err
		}
	}
	if err := p.commit(); err != nil {
		return tool.Result{}, err
	}
	return tool.Text("Success. Updated the following files:\n" + strings.Join(p.summary, "\n")), nil
}

// state returns the planned state of path, loading it from disk on first use.
func (p *planner) state(path string) (*fileState, error) {
	abs := p.env.Resolve(path)
	if p.workspaceOnly {
		if err := checkInside(filepath.Clean(p.env.Workspace), abs); err != nil {
			if errors.Is(err, errOutside) {
				return nil, &planError{path: path, msg: "path is " + err.Error(),
					hint: "apply_patch only changes files inside the workspace; use a path relative to it."}
			}
			return nil, err
		}
	}
	// Work on symlink-free paths: two spellings of a file share one state,
	// and os.Root (which refuses absolute links) never meets a link.
	abs = filepath.Join(realPath(filepath.Dir(abs)), filepath.Base(abs))
	if s, ok := p.files[abs]; ok {
		return s, nil
	}
	s := &fileState{abs: abs, shown: path, target: abs}
	if fi, err := os.Lstat(abs); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if resolved, err := filepath.EvalSymlinks(abs); err == nil {
			s.target = resolved
		}
	}
	fi, err := p.fsys.Stat(s.target)
	switch {
	case err == nil && fi.IsDir():
		return nil, &planError{path: path, msg: "is a folder, not a file"}
	case err == nil && !fi.Mode().IsRegular():
		return nil, &planError{path: path, msg: "is not a regular file"}
	case err == nil:
		data, err := p.fsys.ReadFile(s.target)
		if err != nil {
			return nil, &planError{path: path, msg: fmt.Sprintf("cannot be read: %v", err)}
		}
		s.origExists, s.origContent, s.origPerm = true, data, fi.Mode().Perm()
	case errors.Is(err, os.ErrNotExist):
	case errors.Is(err, syscall.ENOTDIR):
		return nil, &planError{path: path, msg: "a parent of this path is a file, not a folder"}
	case errors.Is(err, os.ErrPermission):
		return nil, &planError{path: path, msg: "permission denied"}
	default:
		return nil, &planError{path: path, msg: fmt.Sprintf("cannot be accessed: %v", err)}
	}
	s.exists, s.content, s.perm = s.origExists, s.origContent, s.origPerm
	p.files[abs] = s
	p.order = append(p.order, s)
	return s, nil
}

// apply plays one file section onto the planned state.
func (p *planner) apply(op fileOp) error {
	s, err := p.state(op.path)
	if err != nil {
		return err
	}
	switch op.kind {
	case opAdd:
		if s.exists {
			return &planError{path: op.path, msg: "cannot be added: the file already exists",
				hint: "Use '*** Update File:' to change it, or '*** Delete File:' it first."}
		}
		var content []byte
		if len(op.lines) > 0 {
			content = []byte(strings.Join(op.lines, "\n") + "\n")
		}
		s.exists, s.content, s.perm = true, content, 0o644
		if s.origExists {
			s.perm = s.origPerm
		}
		p.summary = append(p.summary, "A "+op.path)
	case opDelete:
		if !s.exists {
			return &planError{path: op.path, msg: "cannot be deleted: the file does not exist",
				hint: "Check the path with file_search, or drop this section."}
		}
		s.exists, s.content = false, nil
		p.summary = append(p.summary, "D "+op.path)
	case opUpdate:
		if !s.exists {
			return &planError{path: op.path, msg: "cannot be updated: the file does not exist",
				hint: "Check the path with file_search, or use '*** Add File:' to create it."}
		}
		content := s.content
		if len(op.hunks) > 0 {
			updated, err := applyHunks(string(s.content), op.hunks)
			if err != nil {
				return &planError{path: op.path, msg: err.Error(),
					hint: "Read the file again with file_read and copy the context and '-' lines exactly, then resend the whole patch."}
			}
			content = []byte(updated)
		}
		if op.moveTo != "" {
			d, err := p.state(op.moveTo)
			if err != nil {
				return err
			}
			if d != s {
				if d.exists {
					return &planError{path: op.path, msg: fmt.Sprintf("cannot be moved to %s: that file already exists", op.moveTo),
						hint: "Choose another destination, or '*** Delete File:' it first."}
				}
				d.exists, d.content, d.perm = true, content, s.perm
				s.exists, s.content = false, nil
				p.summary = append(p.summary, fmt.Sprintf("M %s (moved from %s)", op.moveTo, op.path))
				return nil
			}
		}
		s.content = content
		p.summary = append(p.summary, "M "+op.path)
	}
	return nil
}

// commit writes the planned state: every new content is staged in a
// temporary file first, then renamed into place, then deletions run. If a
// step fails, what was done is undone from the contents read while planning.
func (p *planner) commit() error {
	type staged struct {
		s   *fileState
		tmp string
	}
	var (
		writes  []staged
		created []string // folders made for new files
		renamed []*fileState
		deleted []*fileState
	)
	undo := func(cause error) error {
		var errs []error
		for _, w := range writes[len(renamed):] {
			errs = append(errs, p.fsys.Remove(w.tmp))
		}
		for _, s := range renamed {
			errs = append(errs, p.restore(s, false))
		}
		for _, s := range deleted {
			errs = append(errs, p.restore(s, true))
		}
		for i := len(created) - 1; i >= 0; i-- {
			_ = p.fsys.Remove(created[i]) // only succeeds while empty
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("failed to apply patch: %w; failed to roll back: %w", cause, err)
		}
		return fmt.Errorf("failed to apply patch (no file was changed): %w", cause)
	}

	for _, s := range p.order {
		if !s.changed() {
			continue
		}
		dirs, err := mkdirAll(p.fsys, filepath.Dir(s.dest()))
		created = append(created, dirs...)
		if err != nil {
			return undo(err)
		}
		tmp, err := writeStaged(p.fsys, s.dest(), s.content, s.perm)
		if err != nil {
			return undo(err)
		}
		writes = append(writes, staged{s: s, tmp: tmp})
	}
	for _, w := range writes {
		if err := p.fsys.Rename(w.tmp, w.s.dest()); err != nil {
			return undo(fmt.Errorf("failed to replace %q: %w", w.s.dest(), err))
		}
		renamed = append(renamed, w.s)
	}
	for _, s := range p.order {
		if s.exists || !s.origExists {
			continue
		}
		if err := p.fsys.Remove(s.abs); err != nil {
			return undo(fmt.Errorf("failed to delete %q: %w", s.abs, err))
		}
		deleted = append(deleted, s)
	}
	return nil
}

// dest is the file a write of s replaces.
func (s *fileState) dest() string {
	if s.origExists {
		return s.target
	}
	return s.abs
}

// restore puts back what the disk held before the patch. A deleted symlink
// comes back as a regular file with the content it pointed to.
func (p *planner) restore(s *fileState, deleted bool) error {
	if !s.origExists {
		if err := p.fsys.Remove(s.abs); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	dst := s.target
	if deleted {
		dst = s.abs
	}
	tmp, err := writeStaged(p.fsys, dst, s.origContent, s.origPerm)
	if err != nil {
		return err
	}
	return p.fsys.Rename(tmp, dst)
}
