package web

import (
	"context"
	"errors"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/tool"
)

// Limits of web_search.
const (
	// MaxSearchCount is the most results one search returns (the
	// reference's 1-10).
	MaxSearchCount = 10
	// DefaultSearchCount is the count when neither the call nor the Agent
	// sets one.
	DefaultSearchCount = 5
	// maxQueryChars is the longest query sent: Brave refuses longer ones,
	// and no useful search is longer.
	maxQueryChars = 400
	searchTimeout = 20 * time.Second
	// maxSearchBytes bounds what is read of a backend's answer; ten results
	// are a few tens of kilobytes.
	maxSearchBytes = 2 << 20
	// maxSnippetChars bounds one result's snippet, so a backend that puts a
	// whole page there cannot flood the context.
	maxSnippetChars = 600
)

// SearchResult is one hit of a web search.
type SearchResult struct {
	Title   string
	URL     string
	Snippet string
}

// SearchProvider is a web search backend (Brave Search, SearXNG). The tool
// owns validation, caching and presentation; a provider only asks its
// service.
type SearchProvider interface {
	// Name identifies the backend in results and cache keys ("brave").
	Name() string
	// Search returns at most count results for query. Its errors are shown
	// to the model, so they say what happened and what to do.
	Search(ctx context.Context, query string, count int) ([]SearchResult, error)
}

// searchArgs are the arguments of web_search.
type searchArgs struct {
	Query string `json:"query" jsonschema:"what to search for"`
	Count int    `json:"count,omitempty" jsonschema:"number of results, 1-10 (default set by the agent)"`
}

// NewSearch returns the web_search tool on provider: titles, URLs and
// snippets of the top results, cached per provider, query and count for 15
// minutes, inside the untrusted-content markers. defaultCount applies when
// the call gives none (0: DefaultSearchCount).
func NewSearch(provider SearchProvider, defaultCount int, opts ...Option) tool.Tool {
	cfg := newConfig(opts)
	if defaultCount < 1 || defaultCount > MaxSearchCount {
		defaultCount = DefaultSearchCount
	}
	s := &searcher{provider: provider, cfg: cfg, count: defaultCount,
		cache: newTTLCache[[]SearchResult](cfg.clock, cfg.cacheTTL, cfg.cacheSize)}
	return tool.New("web_search",
		"Search the web; returns the title, URL and snippet of the top results (count 1-10). "+
			"Results are cached for 15 minutes. Read a result with web_fetch.",
		s.run,
		tool.ReadOnly(),
		tool.Range("count", tool.Bound(1), tool.Bound(MaxSearchCount)),
	)
}

type searcher struct {
	provider SearchProvider
	cfg      config
	count    int
	cache    *ttlCache[[]SearchResult]
}

func (s *searcher) run(ctx context.Context, _ tool.Env, args searchArgs) (tool.Result, error) {
	query := strings.Join(strings.Fields(args.Query), " ")
	if query == "" {
		return tool.Errorf("error: query is empty; say what to search for."), nil
	}
	if n := utf8.RuneCountInString(query); n > maxQueryChars {
		return tool.Errorf("error: query is %d characters long; web_search takes at most %d. Search for the key words only.", n, maxQueryChars), nil
	}
	count := args.Count
	if count == 0 {
		count = s.count
	}
	name := s.provider.Name()
	key := name + "\x00" + strconv.Itoa(count) + "\x00" + query
	if res, searched, ok := s.cache.get(key); ok {
		age := s.cfg.clock.Since(searched).Round(time.Second)
		return tool.Text(renderSearch(name, query, res, fmt.Sprintf("from cache, searched %s ago", age))), nil
	}
	reqCtx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	res, err := s.provider.Search(reqCtx, query, count)
	if err != nil {
		return searchError(ctx, name, err), nil
	}
	if len(res) > count {
		res = res[:count]
	}
	for i := range res {
		res[i].Title = cleanSnippet(res[i].Title, 200)
		res[i].Snippet = cleanSnippet(res[i].Snippet, maxSnippetChars)
	}
	s.cache.put(key, res)
	return tool.Text(renderSearch(name, query, res, "")), nil
}

// renderSearch lays out results for the model: one line of facts, then the
// results inside the untrusted-content markers (titles and snippets are
// written by the pages' authors).
func renderSearch(provider, query string, res []SearchResult, cacheNote string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Web search (%s) for %q: %d result", provider, query, len(res))
	if len(res) != 1 {
		b.WriteString("s")
	}
	if cacheNote != "" {
		fmt.Fprintf(&b, " (%s)", cacheNote)
	}
	b.WriteString(".\n")
	var c strings.Builder
	if len(res) == 0 {
		c.WriteString("(no results; try other words)")
	}
	for i, r := range res {
		if i > 0 {
			c.WriteString("\n")
		}
		fmt.Fprintf(&c, "%d. %s\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&c, "   %s\n", r.Snippet)
		}
	}
	b.WriteString(WrapUntrusted(provider+" search: "+query, c.String()))
	return b.String()
}

var tags = regexp.MustCompile(`</?[a-zA-Z][^<>]*>`)

// cleanSnippet turns a backend's snippet into one line of plain text: Brave
// marks matches with <strong> and both escape entities. Marker look-alikes
// go first, so stripping tags cannot leave half of one behind.
func cleanSnippet(s string, limit int) string {
	s = markerLike.ReplaceAllString(s, "[marker removed]")
	s = html.UnescapeString(tags.ReplaceAllString(s, ""))
	s = strings.Join(strings.Fields(s), " ")
	if cut, ok := truncate(s, limit); ok {
		return cut + "…"
	}
	return s
}

// SearchError is a backend's refusal or failure, worded for the model.
type SearchError struct {
	// Status is the HTTP status (0 when none came back).
	Status int
	// Message says what happened and what to do.
	Message string
}

func (e *SearchError) Error() string { return e.Message }

// searchError turns a provider's error into a tool error.
func searchError(ctx context.Context, provider string, err error) tool.Result {
	var se *SearchError
	if errors.As(err, &se) {
		return tool.Errorf("error: web_search (%s) failed: %s", provider, se.Message)
	}
	if re, ok := netguard.AsRefused(err); ok {
		return tool.Errorf("error: web_search (%s) cannot reach its search service: %v. The agent's owner must fix spec.tools.webSearch; do not retry.", provider, re)
	}
	if ctx.Err() != nil {
		return tool.Errorf("error: web_search (%s) was cancelled: %v", provider, ctx.Err())
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return tool.Errorf("error: web_search (%s) timed out after %s; the search service is slow or down, try again later.", provider, searchTimeout)
	}
	return tool.Errorf("error: web_search (%s) failed: %v. Try again later.", provider, unwrapURLError(err))
}

// unavailable is the provider of a web_search whose configuration cannot
// work (a missing key): every call says why, instead of the agent failing
// to start or the tool silently vanishing.
type unavailable struct{ name, reason string }

// Unavailable returns a provider whose every search fails with reason.
func Unavailable(name, reason string) SearchProvider { return unavailable{name: name, reason: reason} }

func (u unavailable) Name() string { return u.name }

func (u unavailable) Search(context.Context, string, int) ([]SearchResult, error) {
	return nil, &SearchError{Message: u.reason}
}
