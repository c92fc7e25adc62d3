package patch

import (
	"fmt"
	"strings"
)

// hunkError says which hunk of a file did not apply and why.
type hunkError struct {
	hunk    int      // 1-based
	what    string   // "context line" or "lines"
	lines   []string // what was sought
	from    int      // 1-based file line the search started at
	earlier bool     // the lines exist, but before the previous hunk
}

func (e *hunkError) Error() string {
	var b strings.Builder
	if e.earlier {
		fmt.Fprintf(&b, "hunk %d matches only before the previous hunk; hunks must be in file order", e.hunk)
	} else {
		fmt.Fprintf(&b, "hunk %d did not match: %s not found (searched from line %d, also ignoring differences in surrounding whitespace)", e.hunk, e.what, e.from)
	}
	b.WriteString(":\n")
	for _, l := range e.lines {
		b.WriteString("  | ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// replacement swaps old lines starting at start for lines.
type replacement struct {
	start, old int
	lines      []string
}

// applyHunks returns content with hunks applied. It keeps the file's line
// ending convention (LF or CRLF) and whether it ends with a newline.
func applyHunks(content string, hunks []hunk) (string, error) {
	crlf := strings.Contains(content, "\r\n")
	if crlf {
		content = strings.ReplaceAll(content, "\r\n", "\n")
	}
	finalNewline := content == "" || strings.HasSuffix(content, "\n")
	var lines []string
	if content != "" {
		lines = strings.Split(strings.TrimSuffix(content, "\n"), "\n")
	}

	reps := make([]replacement, 0, len(hunks))
	cursor := 0 // hunks are sought after the previous one
	for i, h := range hunks {
		pos := cursor
		for k, a := range h.anchors {
			at := seekAnchor(lines, a, pos)
			if at < 0 {
				return "", &hunkError{hunk: i + 1, what: "context line", lines: []string{"@@ " + a}, from: pos + 1, earlier: seekAnchor(lines, a, 0) >= 0}
			}
			pos = at + 1
			if k == len(h.anchors)-1 && len(h.oldLines) > 0 && strings.TrimSpace(h.oldLines[0]) == strings.TrimSpace(a) {
				// The hunk repeats its anchor as the first context line.
				pos = at
			}
		}
		if len(h.oldLines) == 0 {
			// Pure addition: after the anchors, or at the end of the file.
			at := len(lines)
			if len(h.anchors) > 0 && !h.eof {
				at = pos
			}
			reps = append(reps, replacement{start: at, lines: h.newLines})
			cursor = at
			continue
		}
		at := seek(lines, h.oldLines, pos, h.eof)
		if at < 0 {
			return "", &hunkError{hunk: i + 1, what: "these lines", lines: h.oldLines, from: pos + 1, earlier: seek(lines, h.oldLines, 0, h.eof) >= 0}
		}
		repl := make([]string, len(h.newLines))
		for j, l := range h.newLines {
			if k := h.context[j]; k >= 0 {
				l = lines[at+k] // context stays as the file has it
			}
			repl[j] = l
		}
		reps = append(reps, replacement{start: at, old: len(h.oldLines), lines: repl})
		cursor = at + len(h.oldLines)
	}

	// Build the result front to back; replacements are in file order.
	out := make([]string, 0, len(lines)+8)
	prev := 0
	for _, r := range reps {
		out = append(out, lines[prev:r.start]...)
		out = append(out, r.lines...)
		prev = r.start + r.old
	}
	out = append(out, lines[prev:]...)

	result := strings.Join(out, "\n")
	if finalNewline && len(out) > 0 {
		result += "\n"
	}
	if crlf {
		result = strings.ReplaceAll(result, "\n", "\r\n")
	}
	return result, nil
}

// matchers compare a file line with a patch line, from strict to lenient.
var matchers = []func(a, b string) bool{
	func(a, b string) bool { return a == b },
	func(a, b string) bool { return strings.TrimRight(a, " \t") == strings.TrimRight(b, " \t") },
	func(a, b string) bool { return strings.TrimSpace(a) == strings.TrimSpace(b) },
}

// seek returns the index of the first occurrence of pattern in lines at or
// after start, or -1. Every candidate is tried exactly first, then ignoring
// trailing whitespace, then ignoring leading and trailing whitespace, so a
// looser match never wins over a stricter one further down. With eof a match
// ending at the last line is preferred at any strictness.
func seek(lines, pattern []string, start int, eof bool) int {
	last := len(lines) - len(pattern)
	if len(pattern) == 0 || last < start {
		return -1
	}
	if eof {
		for _, eq := range matchers {
			if matchAt(lines, pattern, last, eq) {
				return last
			}
		}
	}
	for _, eq := range matchers {
		for i := start; i <= last; i++ {
			if matchAt(lines, pattern, i, eq) {
				return i
			}
		}
	}
	return -1
}

// seekAnchor finds an "@@" anchor line at or after start: like seek, then,
// as anchors are often shortened ("@@ func f" for "func f(x int) {"), the
// first line containing it. An anchor only narrows the search; the hunk's
// own lines must still match.
func seekAnchor(lines []string, anchor string, start int) int {
	if at := seek(lines, []string{anchor}, start, false); at >= 0 {
		return at
	}
	want := strings.TrimSpace(anchor)
	for i := start; i < len(lines); i++ {
		if strings.Contains(lines[i], want) {
			return i
		}
	}
	return -1
}

// matchAt reports whether pattern matches lines at i.
func matchAt(lines, pattern []string, i int, eq func(a, b string) bool) bool {
	for j, p := range pattern {
		if !eq(lines[i+j], p) {
			return false
		}
	}
	return true
}
