package patch

import (
	"fmt"
	"regexp"
	"strings"
)

// Markers of the patch format.
const (
	beginPatch = "*** Begin Patch"
	endPatch   = "*** End Patch"
	addFile    = "*** Add File:"
	deleteFile = "*** Delete File:"
	updateFile = "*** Update File:"
	moveTo     = "*** Move to:"
	endOfFile  = "*** End of File"
)

// opKind is what a file section does.
type opKind int

const (
	opAdd opKind = iota
	opDelete
	opUpdate
)

// fileOp is one "*** Add/Delete/Update File" section.
type fileOp struct {
	kind   opKind
	path   string
	moveTo string   // Update only; "" keeps the name
	lines  []string // Add only: the new file's lines
	hunks  []hunk   // Update only
}

// hunk is one "@@" block of an update.
type hunk struct {
	// anchors are the "@@ <line>" headers: lines sought in order, each after
	// the previous, before the hunk's own lines (a function or class header).
	anchors []string
	// oldLines are the context and removed lines, in file order; newLines the
	// context and added lines.
	oldLines, newLines []string
	// context maps each entry of newLines that is a context line to its index
	// in oldLines (-1 for added lines), so context keeps the file's own text
	// when it matched only after ignoring whitespace.
	context []int
	// eof says the hunk ends at the end of the file.
	eof bool
	// patchLine is the line of the patch where the hunk starts (1-based).
	patchLine int
	// bare counts trailing oldLines that came from empty patch lines; they are
	// usually separators, not context, and are dropped.
	bare int
}

// unifiedHeader matches a unified-diff hunk header ("@@ -12,7 +12,8 @@ func
// f()"), which models sometimes write; the line numbers are ignored and the
// text after it is used as an anchor.
var unifiedHeader = regexp.MustCompile(`^-\d+(,\d+)? \+\d+(,\d+)? @@ ?(.*)$`)

// parseError is a syntax error in the patch text.
type parseError struct {
	line int // 1-based line of the patch; 0 when not about one line
	msg  string
}

func (e *parseError) Error() string {
	if e.line == 0 {
		return e.msg
	}
	return fmt.Sprintf("line %d: %s", e.line, e.msg)
}

// parse splits patch text into file operations. It is lenient where models
// commonly slip (a heredoc wrapper, CRLF, padding around markers, a missing
// "@@" before the first hunk, unified-diff hunk headers, blank lines between
// hunks) and strict where a guess could corrupt a file.
func parse(text string) ([]fileOp, error) {
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(text), "\r\n", "\n"), "\n")
	first := 1 // patch line number of lines[0]
	if n := len(lines); n >= 4 && isHeredocStart(lines[0]) && strings.HasSuffix(strings.TrimSpace(lines[n-1]), "EOF") {
		lines, first = lines[1:n-1], 2
	}
	if strings.TrimSpace(lines[0]) != beginPatch {
		return nil, &parseError{msg: "the first line of the patch must be '*** Begin Patch'"}
	}
	if len(lines) < 2 || strings.TrimSpace(lines[len(lines)-1]) != endPatch {
		return nil, &parseError{msg: "the last line of the patch must be '*** End Patch'"}
	}
	p := parser{lines: lines[1 : len(lines)-1], first: first + 1}
	return p.parse()
}

// isHeredocStart reports whether l opens a shell heredoc (<<EOF, <<'EOF').
func isHeredocStart(l string) bool {
	switch strings.TrimSpace(l) {
	case "<<EOF", "<<'EOF'", `<<"EOF"`:
		return true
	}
	return false
}

// parser walks the lines between the begin and end markers.
type parser struct {
	lines []string
	first int // patch line number of lines[0]
	i     int
}

func (p *parser) lineNo() int { return p.first + p.i }

func (p *parser) errorf(format string, args ...any) error {
	return &parseError{line: p.lineNo(), msg: fmt.Sprintf(format, args...)}
}

func (p *parser) parse() ([]fileOp, error) {
	var ops []fileOp
	for p.i < len(p.lines) {
		l := strings.TrimSpace(p.lines[p.i])
		var (
			op  fileOp
			err error
		)
		switch {
		case l == "":
			p.i++
			continue
		case strings.HasPrefix(l, addFile):
			op, err = p.parseAdd(l)
		case strings.HasPrefix(l, deleteFile):
			op, err = p.parseDelete(l)
		case strings.HasPrefix(l, updateFile):
			op, err = p.parseUpdate(l)
		default:
			return nil, p.errorf("expected '*** Add File: <path>', '*** Update File: <path>' or '*** Delete File: <path>', got %q", p.lines[p.i])
		}
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, &parseError{msg: "the patch has no file sections; add '*** Add File:', '*** Update File:' or '*** Delete File:' sections"}
	}
	return ops, nil
}

// pathAfter returns the path following marker on line l.
func (p *parser) pathAfter(l, marker string) (string, error) {
	path := strings.TrimSpace(strings.TrimPrefix(l, marker))
	if path == "" {
		return "", p.errorf("%q needs a path", marker)
	}
	return path, nil
}

func (p *parser) parseAdd(l string) (fileOp, error) {
	path, err := p.pathAfter(l, addFile)
	if err != nil {
		return fileOp{}, err
	}
	op := fileOp{kind: opAdd, path: path}
	for p.i++; p.i < len(p.lines); p.i++ {
		line := p.lines[p.i]
		switch {
		case strings.HasPrefix(line, "+"):
			op.lines = append(op.lines, line[1:])
		case line == "" && p.nextAddLine():
			// An empty line inside the content, written without its "+".
			op.lines = append(op.lines, "")
		case strings.HasPrefix(line, "***") || strings.TrimSpace(line) == "":
			return op, nil
		default:
			return fileOp{}, p.errorf("every line of an added file must start with '+', got %q", line)
		}
	}
	return op, nil
}

// nextAddLine reports whether a "+" line follows the current run of empty
// lines.
func (p *parser) nextAddLine() bool {
	for j := p.i + 1; j < len(p.lines); j++ {
		if p.lines[j] != "" {
			return strings.HasPrefix(p.lines[j], "+")
		}
	}
	return false
}

func (p *parser) parseDelete(l string) (fileOp, error) {
	path, err := p.pathAfter(l, deleteFile)
	if err != nil {
		return fileOp{}, err
	}
	p.i++
	return fileOp{kind: opDelete, path: path}, nil
}

func (p *parser) parseUpdate(l string) (fileOp, error) {
	path, err := p.pathAfter(l, updateFile)
	if err != nil {
		return fileOp{}, err
	}
	op := fileOp{kind: opUpdate, path: path}
	p.i++
	if p.i < len(p.lines) && strings.HasPrefix(strings.TrimSpace(p.lines[p.i]), moveTo) {
		if op.moveTo, err = p.pathAfter(strings.TrimSpace(p.lines[p.i]), moveTo); err != nil {
			return fileOp{}, err
		}
		p.i++
	}
	var cur *hunk
	for ; p.i < len(p.lines); p.i++ {
		line := p.lines[p.i]
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == endOfFile:
			if cur == nil {
				return fileOp{}, p.errorf("'*** End of File' must follow the lines of a hunk")
			}
			cur.eof = true
			if err := closeHunk(&op, cur); err != nil {
				return fileOp{}, err
			}
			cur = nil
		case strings.HasPrefix(line, "***"):
			if err := closeHunk(&op, cur); err != nil {
				return fileOp{}, err
			}
			if len(op.hunks) == 0 && op.moveTo == "" {
				return fileOp{}, &parseError{line: p.lineNo() - 1, msg: fmt.Sprintf("'*** Update File: %s' has no hunks; add '@@' hunks with ' ', '-' and '+' lines", path)}
			}
			return op, nil
		case strings.HasPrefix(line, "@@"):
			if cur, err = p.hunkHeader(&op, cur, line); err != nil {
				return fileOp{}, err
			}
		case line == "" && cur == nil:
			// Blank line between hunks.
		case line == "" || line[0] == ' ' || line[0] == '-' || line[0] == '+':
			if cur == nil {
				// The first hunk may omit its "@@" line.
				cur = &hunk{patchLine: p.lineNo()}
			}
			cur.addLine(line)
		default:
			return fileOp{}, p.errorf("unexpected line %q in hunk %d of %s; every hunk line must start with ' ' (context), '-' (removed) or '+' (added), and hunks start with '@@'", line, len(op.hunks)+1, path)
		}
	}
	if err := closeHunk(&op, cur); err != nil {
		return fileOp{}, err
	}
	if len(op.hunks) == 0 && op.moveTo == "" {
		return fileOp{}, &parseError{line: p.lineNo(), msg: fmt.Sprintf("'*** Update File: %s' has no hunks; add '@@' hunks with ' ', '-' and '+' lines", path)}
	}
	return op, nil
}

// hunkHeader reads an "@@" line into a new hunk, or the open one if still empty.
func (p *parser) hunkHeader(op *fileOp, cur *hunk, line string) (*hunk, error) {
	// Consecutive "@@" lines add anchors to the same hunk.
	if cur != nil && len(cur.oldLines)+len(cur.newLines) > 0 {
		if err := closeHunk(op, cur); err != nil {
			return nil, err
		}
		cur = nil
	}
	if cur == nil {
		cur = &hunk{patchLine: p.lineNo()}
	}
	anchor := strings.TrimSpace(line[2:])
	if m := unifiedHeader.FindStringSubmatch(anchor); m != nil {
		anchor = strings.TrimSpace(m[3])
	}
	if anchor != "" {
		cur.anchors = append(cur.anchors, anchor)
	}
	return cur, nil
}

// addLine adds one ' ', '-' or '+' line, or an empty one taken as context.
func (h *hunk) addLine(line string) {
	switch {
	case line == "" || line[0] == ' ':
		text := strings.TrimPrefix(line, " ")
		h.context = append(h.context, len(h.oldLines))
		h.oldLines = append(h.oldLines, text)
		h.newLines = append(h.newLines, text)
	case line[0] == '-':
		h.oldLines = append(h.oldLines, line[1:])
	default:
		h.context = append(h.context, -1)
		h.newLines = append(h.newLines, line[1:])
	}
	if line == "" {
		h.bare++
	} else {
		h.bare = 0
	}
}

// closeHunk appends cur, if any, to op's hunks, less its trailing blank lines.
func closeHunk(op *fileOp, cur *hunk) error {
	if cur == nil {
		return nil
	}
	// Trailing empty patch lines are separators, not context; dropping
	// context never changes what a hunk replaces.
	cur.oldLines = cur.oldLines[:len(cur.oldLines)-cur.bare]
	cur.newLines = cur.newLines[:len(cur.newLines)-cur.bare]
	cur.context = cur.context[:len(cur.context)-cur.bare]
	if len(cur.oldLines) == 0 && len(cur.newLines) == 0 {
		return &parseError{line: cur.patchLine, msg: fmt.Sprintf("hunk %d of %s has no lines; each hunk needs ' ' context, '-' removed or '+' added lines", len(op.hunks)+1, op.path)}
	}
	op.hunks = append(op.hunks, *cur)
	return nil
}
