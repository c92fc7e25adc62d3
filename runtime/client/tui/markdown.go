package tui

import (
	"strings"

	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/glamour/styles"
	"github.com/charmbracelet/x/ansi"
)

// markdown renders the agent's finished answers as a terminal shows
// markdown (headings, emphasis, lists, tables, highlighted code), with
// glamour, one renderer per width (building one costs more than rendering
// an answer). A streaming answer stays plain text until it is complete: half
// a table or an open fence would jump around as it grows.
type markdown struct {
	style     string
	renderers map[int]*glamour.TermRenderer
}

// newMarkdown uses glamour's standard style ("dark", "light", "notty" for
// no colours, ...).
func newMarkdown(style string) *markdown {
	return &markdown{style: style, renderers: map[int]*glamour.TermRenderer{}}
}

// render returns text drawn for width columns, or text wrapped as plain
// when it cannot be drawn.
func (md *markdown) render(text string, width int) string {
	if md == nil {
		return wrap(text, width)
	}
	r, ok := md.renderers[width]
	if !ok {
		base, ok := styles.DefaultStyles[md.style]
		if !ok {
			base = &styles.DarkStyleConfig
		}
		// The answer lines up with the rest of the transcript: no margin
		// around the document (glamour's styles indent it by 2).
		style := *base
		style.Document.Margin = new(uint)
		var err error
		r, err = glamour.NewTermRenderer(glamour.WithStyles(style), glamour.WithWordWrap(width), glamour.WithEmoji())
		if err != nil {
			return wrap(text, width)
		}
		md.renderers[width] = r
	}
	out, err := r.Render(text)
	if err != nil {
		return wrap(text, width)
	}
	// glamour frames a document with blank lines (the transcript has its
	// own) and pads every line to the margin (a copy would carry them).
	lines := strings.Split(strings.Trim(out, "\n"), "\n")
	for i, l := range lines {
		lines[i] = trimRightPadding(l)
	}
	return strings.Join(lines, "\n")
}

// trimRightPadding drops the spaces glamour pads a line with, keeping the
// styling of what is left.
func trimRightPadding(l string) string {
	w := ansi.StringWidth(strings.TrimRight(ansi.Strip(l), " "))
	if w == ansi.StringWidth(l) {
		return l
	}
	return ansi.Truncate(l, w, "") + "\x1b[0m"
}
