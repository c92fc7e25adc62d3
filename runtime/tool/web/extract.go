package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strings"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Extraction modes of web_fetch.
const (
	ModeMarkdown = "markdown"
	ModeText     = "text"
)

// contentKind is how web_fetch treats a response body.
type contentKind int

const (
	kindBinary contentKind = iota
	kindHTML
	kindJSON
	kindText
)

// kindOf classifies a response by its declared type, sniffing the body when
// the server declared none.
func kindOf(contentType string, body []byte) (contentKind, string) {
	if contentType == "" {
		contentType = http.DetectContentType(body)
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	}
	switch {
	case mt == "text/html", mt == "application/xhtml+xml":
		return kindHTML, mt
	case mt == "application/json", strings.HasSuffix(mt, "+json"):
		return kindJSON, mt
	case isTextual(mt):
		return kindText, mt
	}
	return kindBinary, mt
}

// page is what web_fetch extracted from one response; it is what the cache
// keeps.
type page struct {
	status      string
	contentType string
	title       string
	// text is the content, already cut to MaxChars so a cached page stays
	// small; chars is the length before the cut.
	text  string
	chars int
}

// extractHTML turns an HTML document into markdown or plain text and returns
// its title. Links are made absolute against pageURL so the model can follow
// them.
func extractHTML(body []byte, pageURL, mode string) (title, text string, err error) {
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		return "", "", fmt.Errorf("failed to parse HTML: %w", err)
	}
	title = findTitle(doc)
	if mode == ModeText {
		return title, htmlToText(doc), nil
	}
	conv := converter.NewConverter(converter.WithPlugins(
		base.NewBasePlugin(),
		commonmark.NewCommonmarkPlugin(),
		table.NewTablePlugin(),
	))
	md, err := conv.ConvertNode(doc, converter.WithDomain(pageURL))
	if err != nil {
		return "", "", fmt.Errorf("failed to convert HTML to markdown: %w", err)
	}
	return title, string(md), nil
}

// prettyJSON indents a JSON document; a body that does not parse is returned
// as is (the server said JSON, the model can still read it).
func prettyJSON(body []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(body), "", "  "); err != nil {
		return string(body)
	}
	return out.String()
}

func findTitle(n *html.Node) string {
	if n.Type == html.ElementNode && n.DataAtom == atom.Title {
		var b strings.Builder
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
		}
		return strings.Join(strings.Fields(b.String()), " ")
	}
	if n.Type == html.ElementNode && n.DataAtom == atom.Body {
		return ""
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if t := findTitle(c); t != "" {
			return t
		}
	}
	return ""
}

// isSkipped reports elements that carry no readable text.
func isSkipped(a atom.Atom) bool {
	switch a {
	case atom.Head, atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg,
		atom.Iframe, atom.Object, atom.Canvas, atom.Input, atom.Textarea, atom.Select,
		atom.Button, atom.Math:
		return true
	}
	return false
}

// isBlock reports elements that start a new paragraph.
func isBlock(a atom.Atom) bool {
	switch a {
	case atom.P, atom.Div, atom.Section, atom.Article, atom.Header, atom.Footer,
		atom.Nav, atom.Aside, atom.Main, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5,
		atom.H6, atom.Ul, atom.Ol, atom.Table, atom.Blockquote, atom.Pre, atom.Form,
		atom.Fieldset, atom.Figure, atom.Figcaption, atom.Dl, atom.Hr, atom.Address,
		atom.Details, atom.Summary, atom.Body:
		return true
	}
	return false
}

// isLine reports elements that start a new line.
func isLine(a atom.Atom) bool {
	switch a {
	case atom.Li, atom.Tr, atom.Dt, atom.Dd, atom.Caption:
		return true
	}
	return false
}

// htmlToText renders a document as plain text: paragraphs separated by blank
// lines, list items and table rows on their own lines, cells separated by
// tabs, whitespace collapsed except in <pre>, no markup at all.
func htmlToText(doc *html.Node) string {
	w := &textWriter{}
	w.walk(doc, false)
	out := w.b.String()
	out = trailingSpace.ReplaceAllString(out, "\n")
	out = manyNewlines.ReplaceAllString(out, "\n\n")
	return strings.TrimSpace(out)
}

var (
	trailingSpace = regexp.MustCompile(`[ \t]+\n`)
	manyNewlines  = regexp.MustCompile(`\n{3,}`)
)

// textWriter accumulates text with owed breaks, so nested blocks do not pile
// up blank lines.
type textWriter struct {
	b       strings.Builder
	pending int  // newlines owed before the next text
	space   bool // a space owed before the next text
}

func (w *textWriter) want(n int) {
	if w.b.Len() > 0 && n > w.pending {
		w.pending = n
	}
}

func (w *textWriter) write(s string) {
	if s == "" {
		return
	}
	out := w.b.String()
	if w.pending > 0 {
		have := len(out) - len(strings.TrimRight(out, "\n"))
		if n := w.pending - have; n > 0 {
			w.b.WriteString(strings.Repeat("\n", n))
		}
	} else if w.space && out != "" && !strings.HasSuffix(out, "\n") {
		w.b.WriteByte(' ')
	}
	w.pending, w.space = 0, false
	w.b.WriteString(s)
}

func (w *textWriter) walk(n *html.Node, pre bool) {
	switch n.Type {
	case html.TextNode:
		if pre {
			w.write(n.Data)
			return
		}
		fields := strings.Fields(n.Data)
		if len(fields) == 0 {
			if n.Data != "" {
				w.space = true
			}
			return
		}
		if startsWithSpace(n.Data) {
			w.space = true
		}
		w.write(strings.Join(fields, " "))
		if endsWithSpace(n.Data) {
			w.space = true
		}
		return
	case html.ElementNode:
		if isSkipped(n.DataAtom) {
			return
		}
		switch {
		case n.DataAtom == atom.Br:
			w.write("\n")
			return
		case isBlock(n.DataAtom):
			w.want(2)
		case isLine(n.DataAtom):
			w.want(1)
		case n.DataAtom == atom.Td || n.DataAtom == atom.Th:
			if prevElement(n) != nil {
				w.write("\t")
			}
		case n.DataAtom == atom.Img:
			if alt := attr(n, "alt"); alt != "" {
				w.write("[" + strings.Join(strings.Fields(alt), " ") + "]")
			}
			return
		}
		if n.DataAtom == atom.Li {
			w.write("- ")
		}
		pre = pre || n.DataAtom == atom.Pre
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c, pre)
	}
	if n.Type == html.ElementNode {
		switch {
		case isBlock(n.DataAtom):
			w.want(2)
		case isLine(n.DataAtom):
			w.want(1)
		}
	}
}

func startsWithSpace(s string) bool { return s != "" && strings.ContainsRune(" \t\n\r\f", rune(s[0])) }
func endsWithSpace(s string) bool {
	return s != "" && strings.ContainsRune(" \t\n\r\f", rune(s[len(s)-1]))
}

func prevElement(n *html.Node) *html.Node {
	for p := n.PrevSibling; p != nil; p = p.PrevSibling {
		if p.Type == html.ElementNode {
			return p
		}
	}
	return nil
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
