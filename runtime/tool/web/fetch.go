package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/tool"
)

// fetchArgs are the arguments of web_fetch.
type fetchArgs struct {
	URL         string `json:"url" jsonschema:"absolute http:// or https:// URL of the page"`
	ExtractMode string `json:"extractMode,omitempty" jsonschema:"markdown (default) keeps headings, links and tables; text is plain text without markup"`
	MaxChars    int    `json:"maxChars,omitempty" jsonschema:"most characters of content to return; default and maximum 50000"`
}

const (
	fetchTimeout = 30 * time.Second
	// maxFetchBytes bounds what is read of a page. HTML is several times
	// larger than its text, so this is well above MaxChars.
	maxFetchBytes = 5 << 20
)

// NewFetch returns the web_fetch tool: GET a page through guard and return its
// readable content (HTML as markdown or text, JSON pretty-printed, other text
// as is), cached per URL and mode for 15 minutes.
func NewFetch(guard *netguard.Guard, opts ...Option) tool.Tool {
	cfg := newConfig(opts)
	f := &fetcher{guard: guard, cfg: cfg, cache: newTTLCache[page](cfg.clock, cfg.cacheTTL, cfg.cacheSize)}
	return tool.New("web_fetch",
		"Fetch a public web page and return its readable content: HTML as markdown (or plain text with extractMode=text), "+
			"JSON pretty-printed, other text as is; at most 50,000 characters. Results are cached for 15 minutes. "+
			"Redirects are not followed: the new URL is reported. For pages that need JavaScript use the browser tool.",
		f.run,
		tool.ReadOnly(),
		tool.Enum("extractMode", ModeMarkdown, ModeText),
		tool.Range("maxChars", tool.Bound(100), nil),
	)
}

type fetcher struct {
	guard *netguard.Guard
	cfg   config
	cache *ttlCache[page]
}

func (f *fetcher) run(ctx context.Context, _ tool.Env, args fetchArgs) (tool.Result, error) {
	u, err := f.guard.CheckURL(args.URL)
	if err != nil {
		return tool.Errorf("error: %v. web_fetch only reaches public http(s) URLs.", err), nil
	}
	mode := args.ExtractMode
	if mode == "" {
		mode = ModeMarkdown
	}
	maxChars := args.MaxChars
	if maxChars <= 0 || maxChars > MaxChars {
		maxChars = MaxChars
	}
	target := u.String()
	key := mode + " " + target

	if p, fetched, ok := f.cache.get(key); ok {
		age := f.cfg.clock.Since(fetched).Round(time.Second)
		return tool.Text(render(target, mode, p, maxChars, fmt.Sprintf("from cache, fetched %s ago", age), false)), nil
	}

	reqCtx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, target, nil)
	if err != nil {
		return tool.Errorf("error: failed to build request for %s: %v", target, err), nil
	}
	req.Header.Set("User-Agent", f.cfg.userAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5")
	resp, err := f.guard.Client(fetchTimeout).Do(req)
	if err != nil {
		return requestError(ctx, "web_fetch", target, fetchTimeout, err), nil
	}
	defer func() { _ = resp.Body.Close() }()

	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return tool.Text(fmt.Sprintf("%s answered HTTP %s.\n%s", target, resp.Status, redirectNote(f.guard, "web_fetch", u, resp))), nil
	}
	raw, more, err := readLimited(resp.Body, maxFetchBytes)
	if err != nil {
		return requestError(ctx, "web_fetch", target, fetchTimeout, fmt.Errorf("failed to read page: %w", err)), nil
	}
	ct := resp.Header.Get("Content-Type")
	kind, mediaType := kindOf(ct, raw)
	if kind == kindBinary {
		return tool.Errorf("error: %s returned %s content (HTTP %s), which is not text; web_fetch reads only HTML, JSON and text pages.", target, mediaType, resp.Status), nil
	}

	p := page{status: resp.Status, contentType: mediaType}
	switch kind {
	case kindHTML:
		p.title, p.text, err = extractHTML(decode(raw, ct), target, mode)
		if err != nil {
			return tool.Errorf("error: failed to read %s: %v", target, err), nil
		}
	case kindJSON:
		p.text = prettyJSON(raw)
	default:
		p.text = string(decode(raw, ct))
	}
	p.chars = utf8.RuneCountInString(p.text)
	p.text, _ = truncate(strings.ToValidUTF8(p.text, "\uFFFD"), MaxChars)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 && !more {
		f.cache.put(key, p)
	}
	return tool.Text(render(target, mode, p, maxChars, "", more)), nil
}

// decode converts a text body to UTF-8 using the declared (or, for HTML,
// sniffed) charset; a body it cannot convert is used as is.
func decode(raw []byte, contentType string) []byte {
	r, err := charset.NewReader(bytes.NewReader(raw), contentType)
	if err != nil {
		return raw
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return raw
	}
	return out
}

// render lays out a fetched page for the model: one line of facts, then the
// untrusted content in its markers.
func render(target, mode string, p page, maxChars int, cacheNote string, partial bool) string {
	text, _ := truncate(p.text, maxChars)
	cut := p.chars > maxChars
	var b strings.Builder
	fmt.Fprintf(&b, "Fetched %s: HTTP %s, %s", target, p.status, p.contentType)
	if p.contentType == "text/html" || p.contentType == "application/xhtml+xml" {
		fmt.Fprintf(&b, " as %s", mode)
	}
	if cacheNote != "" {
		fmt.Fprintf(&b, " (%s)", cacheNote)
	}
	b.WriteString(".\n")
	if cut {
		fmt.Fprintf(&b, "Content cut to the first %d of %d characters.\n", maxChars, p.chars)
	}
	if partial {
		fmt.Fprintf(&b, "The page is larger than %d MiB; only its beginning was read.\n", maxFetchBytes>>20)
	}
	var content strings.Builder
	if p.title != "" {
		fmt.Fprintf(&content, "Title: %s\n\n", p.title)
	}
	if strings.TrimSpace(text) == "" {
		content.WriteString("(no readable content; if the page builds its content with JavaScript, use the browser tool)")
	} else {
		content.WriteString(text)
	}
	b.WriteString(WrapUntrusted(target, content.String()))
	return b.String()
}
