package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// EditArgs are the arguments of file_edit.
type EditArgs struct {
	Path       string `json:"path" jsonschema:"File to edit; relative paths resolve against the workspace"`
	OldString  string `json:"old_string" jsonschema:"Exact text to replace, including whitespace and indentation"`
	NewString  string `json:"new_string" jsonschema:"Text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"Replace every occurrence instead of requiring old_string to be unique"`
}

// NewFileEdit returns file_edit, an exact string replacement. Requiring a
// unique match (unless replace_all) keeps the model from editing the wrong
// place when a snippet repeats.
func NewFileEdit(opts ...Option) tool.Tool {
	return tool.New("file_edit",
		"Replace exact text in a file. Read the file first; old_string must match exactly and occur once, unless replace_all is true.",
		newPaths(opts).editFile,
	)
}

// lineNumberPrefix matches the "    12\t" prefix file_read puts before lines,
// which models sometimes copy into old_string.
var lineNumberPrefix = regexp.MustCompile(`(?m)^ *\d+\t`)

func (ps *Paths) editFile(_ context.Context, env tool.Env, a EditArgs) (tool.Result, error) {
	switch {
	case strings.TrimSpace(a.Path) == "":
		return tool.Errorf("error: path is empty. Pass the file to edit."), nil
	case a.OldString == "":
		return tool.Errorf("error: old_string is empty. Pass the exact text to replace; to create or overwrite a whole file use file_write."), nil
	case a.OldString == a.NewString:
		return tool.Errorf("error: old_string and new_string are identical, so there is nothing to change. Pass the text you want in new_string."), nil
	}
	pl, p, res, ok := ps.writable(env, a.Path)
	if !ok {
		return res, nil
	}
	defer pl.Close()
	fi, err := pl.root.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return tool.Errorf("error: %s does not exist. Check the path with file_search, or create the file with file_write.", a.Path), nil
		}
		if res, ok := openError(err, a.Path); ok {
			return res, nil
		}
		return tool.Result{}, errorf("stat file", a.Path, err)
	}
	if fi.IsDir() {
		return tool.Errorf("error: %s is a folder, not a file. Pass the file to edit.", a.Path), nil
	}
	if !fi.Mode().IsRegular() {
		return tool.Errorf("error: %s is not a regular file (it is a device, pipe or socket).", a.Path), nil
	}
	data, err := pl.root.ReadFile(p)
	if err != nil {
		if res, ok := openError(err, a.Path); ok {
			return res, nil
		}
		return tool.Result{}, errorf("read file", a.Path, err)
	}
	content := string(data)
	oldS, newS := a.OldString, a.NewString
	n := strings.Count(content, oldS)
	if n == 0 && strings.Contains(content, "\r\n") && strings.Contains(oldS, "\n") && !strings.Contains(oldS, "\r\n") {
		// The file uses CRLF line endings and file_read showed it without the
		// CRs: match and write in the file's convention.
		oldS, newS = toCRLF(oldS), toCRLF(newS)
		n = strings.Count(content, oldS)
	}
	switch {
	case n == 0:
		return tool.Errorf("error: old_string was not found in %s. %s", a.Path, notFoundHint(content, a.OldString)), nil
	case n > 1 && !a.ReplaceAll:
		return tool.Errorf("error: old_string occurs %d times in %s. Include more surrounding lines in old_string so it matches exactly one place, or set replace_all to true to replace all %d.", n, a.Path, n), nil
	}
	if a.ReplaceAll {
		content = strings.ReplaceAll(content, oldS, newS)
	} else {
		content = strings.Replace(content, oldS, newS, 1)
	}
	if err := writeAtomic(pl.root, p, []byte(content), fi.Mode().Perm()); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return tool.Errorf("error: permission denied writing %s.", a.Path), nil
		}
		return tool.Result{}, err
	}
	return tool.Text(fmt.Sprintf("Edited %s: replaced %d occurrence(s).", a.Path, n)), nil
}

// notFoundHint says why old_string may have missed, so the next try succeeds.
func notFoundHint(content, old string) string {
	const readFirst = "Read the file with file_read and copy the text exactly, including whitespace and indentation."
	if lineNumberPrefix.MatchString(old) && !lineNumberPrefix.MatchString(content) {
		return "old_string seems to include the line-number prefixes from file_read; leave them out. " + readFirst
	}
	if strings.TrimSpace(old) != "" && strings.Contains(squashSpace(content), squashSpace(old)) {
		return "The text exists but with different whitespace or indentation. " + readFirst
	}
	return readFirst
}

// squashSpace trims every line, so texts differing only in indentation or
// trailing spaces compare equal.
func squashSpace(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}

// toCRLF converts LF line endings to CRLF.
func toCRLF(s string) string {
	return strings.ReplaceAll(s, "\n", "\r\n")
}
