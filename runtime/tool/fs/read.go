package fs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	// defaultReadLimit is how many lines file_read returns when not told.
	defaultReadLimit = 2000
	// maxReadChars caps file_read output so one call cannot flood the context.
	maxReadChars = 50_000
)

// ReadArgs are the arguments of file_read.
type ReadArgs struct {
	Path   string `json:"path" jsonschema:"File to read; relative paths resolve against the workspace"`
	Offset int    `json:"offset,omitempty" jsonschema:"First line to return, 1-based (default 1)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"Maximum number of lines to return (default 2000)"`
}

// NewFileRead returns file_read, which shows a text file with line numbers so
// the model can cite lines and copy exact text into file_edit and apply_patch.
func NewFileRead(opts ...Option) tool.Tool {
	return tool.New("file_read",
		"Read a text file (lines numbered; offset and limit page through long files) or look at an image (PNG, JPEG, GIF, WebP).",
		newPaths(opts).readFile,
		tool.ReadOnly(),
		tool.Range("offset", tool.Bound(1), nil),
		tool.Range("limit", tool.Bound(1), nil),
	)
}

func (ps *Paths) readFile(ctx context.Context, env tool.Env, a ReadArgs) (tool.Result, error) {
	if strings.TrimSpace(a.Path) == "" {
		return tool.Errorf("error: path is empty. Pass the file to read."), nil
	}
	offset, limit := a.Offset, a.Limit
	if offset <= 0 {
		offset = 1
	}
	if limit <= 0 {
		limit = defaultReadLimit
	}
	pl, f, res, err := ps.openRegular(env, a.Path)
	if f == nil {
		return res, err
	}
	defer pl.Close()
	defer func() { _ = f.Close() }()
	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(sniffLen)
	if _, ok := ImageType(head); ok {
		return imageResult(pl, a.Path), nil
	}
	if isBinary(head) {
		return tool.Errorf("error: %s looks like a binary file (it contains NUL bytes); file_read only shows text files.", a.Path), nil
	}

	w, err := readWindow(ctx, br, offset, limit)
	if err != nil {
		return tool.Result{}, errorf("read file", a.Path, err)
	}
	// Count what is left so the model knows how large the file is.
	rest, err := countLines(br)
	if err != nil {
		return tool.Result{}, errorf("read file", a.Path, err)
	}
	return w.result(a.Path, offset, w.lineNo+rest), nil
}

// window is the part of a file file_read shows.
type window struct {
	out     strings.Builder
	lineNo  int  // lines consumed from the file
	last    int  // last line shown
	chars   int  // characters in out
	capped  bool // stopped because of maxReadChars
	cutLine bool // the only shown line was cut to fit
}

// readWindow reads limit lines from line offset on, numbered, up to
// maxReadChars characters (a single longer line is cut).
func readWindow(ctx context.Context, br *bufio.Reader, offset, limit int) (*window, error) {
	w := &window{}
	for {
		if w.lineNo%1024 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		line, ok, err := readLine(br, maxReadChars*utf8.UTFMax)
		if err != nil {
			return nil, err
		}
		if !ok {
			return w, nil
		}
		w.lineNo++
		if w.lineNo < offset {
			continue
		}
		if w.lineNo >= offset+limit {
			return w, nil
		}
		entry := fmt.Sprintf("%6d\t%s\n", w.lineNo, strings.TrimSuffix(string(line), "\r"))
		n := utf8.RuneCountInString(entry)
		if w.chars+n > maxReadChars {
			if w.last != 0 {
				w.capped = true
				return w, nil
			}
			// A single line longer than the cap: show its start.
			entry = truncateRunes(entry, maxReadChars) + "\n"
			w.cutLine = true
			n = maxReadChars
		}
		w.out.WriteString(entry)
		w.chars += n
		w.last = w.lineNo
		if w.cutLine {
			return w, nil
		}
	}
}

// result is what file_read returns for the window of a file of total
// lines, with how to read on.
func (w *window) result(path string, offset, total int) tool.Result {
	switch {
	case total == 0:
		return tool.Text(fmt.Sprintf("(%s is empty)", path))
	case w.last == 0:
		return tool.Errorf("error: offset %d is past the end of %s, which has %d lines. Use an offset between 1 and %d.", offset, path, total, total)
	}
	content := strings.TrimSuffix(w.out.String(), "\n")
	last, next := w.last, w.last+1
	switch {
	case w.cutLine && last < total:
		content += fmt.Sprintf("\n\n[Line %d is longer than %d characters and was cut. The file has %d lines; call file_read with offset=%d to continue.]", last, maxReadChars, total, next)
	case w.cutLine:
		content += fmt.Sprintf("\n\n[Line %d is longer than %d characters and was cut.]", last, maxReadChars)
	case w.capped:
		content += fmt.Sprintf("\n\n[Output capped at %d characters: showing lines %d-%d of %d. Call file_read with offset=%d to continue.]", maxReadChars, offset, last, total, next)
	case last < total:
		content += fmt.Sprintf("\n\n[Showing lines %d-%d of %d. Call file_read with offset=%d to continue.]", offset, last, total, next)
	}
	return tool.Text(content)
}

// readLine returns the next line without its newline, keeping at most keep
// bytes of it (the rest is discarded so a huge line cannot exhaust memory). ok
// is false at the end of input.
func readLine(br *bufio.Reader, keep int) (line []byte, ok bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		ok = ok || len(chunk) > 0
		if room := keep - len(line); room > 0 {
			line = append(line, chunk[:min(len(chunk), room)]...)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte("\n")), true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return line, ok, nil
		default:
			return nil, false, err
		}
	}
}

// countLines counts the lines left in br (a last line without a newline
// counts).
func countLines(br *bufio.Reader) (int, error) {
	buf := make([]byte, 64<<10)
	n, lastByte := 0, byte('\n')
	for {
		k, err := br.Read(buf)
		if k > 0 {
			n += bytes.Count(buf[:k], []byte{'\n'})
			lastByte = buf[k-1]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if lastByte != '\n' {
		n++
	}
	return n, nil
}

// truncateRunes returns s cut to at most n runes.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// openRegular opens the regular file at path, within the areas, for
// reading; the caller closes pl and f. Without f, res is the model's error
// (a path outside, a folder, a missing file) or err an unexpected failure.
func (ps *Paths) openRegular(env tool.Env, path string) (pl place, f *os.File, res tool.Result, err error) {
	pl, res, ok := ps.locate(env, path, path, false)
	if !ok {
		return place{}, nil, res, nil
	}
	if res, ok := regularFile(pl, path); !ok {
		pl.Close()
		return place{}, nil, res, nil
	}
	f, err = pl.root.Open(pl.rel)
	if err != nil {
		pl.Close()
		if res, ok := openError(err, path); ok {
			return place{}, nil, res, nil
		}
		return place{}, nil, tool.Result{}, errorf("open file", path, err)
	}
	return pl, f, tool.Result{}, nil
}
