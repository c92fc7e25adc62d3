package web

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/picobot/picobot/runtime/netguard"
)

// BraveEndpoint is the Brave Search API's web search.
const BraveEndpoint = "https://api.search.brave.com/res/v1/web/search"

// WithBraveEndpoint sends Brave searches to endpoint instead of
// BraveEndpoint (tests' local server speaking the same API).
func WithBraveEndpoint(endpoint string) Option {
	return func(cfg *config) { cfg.braveEndpoint = endpoint }
}

// brave asks the Brave Search API: GET <endpoint>?q=&count= with the
// subscription token in X-Subscription-Token; the answer's web.results hold
// title, url and description.
type brave struct {
	guard    *netguard.Guard
	key      string
	endpoint string
	ua       string
}

// NewBrave returns the Brave Search API backend with the subscription
// token key. Its requests go through guard like web_fetch's.
func NewBrave(guard *netguard.Guard, key string, opts ...Option) SearchProvider {
	cfg := newConfig(opts)
	return &brave{guard: guard, key: key, endpoint: cfg.braveEndpoint, ua: cfg.userAgent}
}

func (b *brave) Name() string { return "brave" }

// braveResponse is the part of Brave's WebSearchApiResponse web_search
// reads.
type braveResponse struct {
	Type string `json:"type"`
	Web  *struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
		} `json:"results"`
	} `json:"web"`
}

// braveError is Brave's ErrorResponse.
type braveError struct {
	Type  string `json:"type"`
	Error struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	} `json:"error"`
}

func (b *brave) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	u, err := url.Parse(b.endpoint)
	if err != nil {
		return nil, fmt.Errorf("failed to parse Brave endpoint %q: %w", b.endpoint, err)
	}
	u.RawQuery = url.Values{"q": {query}, "count": {strconv.Itoa(count)}}.Encode()
	header := http.Header{"Accept": {"application/json"}, "X-Subscription-Token": {b.key}, "User-Agent": {b.ua}}
	resp, err := searchGet(ctx, b.guard, u.String(), header)
	if err != nil {
		return nil, err
	}
	body := resp.body
	if resp.StatusCode != http.StatusOK {
		var e braveError
		detail := ""
		if json.Unmarshal(body, &e) == nil && (e.Error.Detail != "" || e.Error.Code != "") {
			detail = strings.TrimPrefix(e.Error.Code+": "+e.Error.Detail, ": ")
		}
		// Brave answers a bad token with 422 SUBSCRIPTION_TOKEN_INVALID.
		auth := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
			strings.HasPrefix(e.Error.Code, "SUBSCRIPTION")
		return nil, statusError("Brave Search", resp, detail, auth,
			"The Agent's Brave Search key (spec.tools.webSearch.apiKeySecretRef) is wrong or has no subscription; its owner must fix it. Do not retry.")
	}
	var r braveResponse
	if err := decodeJSON(resp, body, &r); err != nil {
		return nil, &SearchError{Status: resp.StatusCode, Message: "Brave Search answered with " + err.Error()}
	}
	if r.Type != "search" {
		return nil, &SearchError{Status: resp.StatusCode, Message: fmt.Sprintf("Brave Search answered with a %q object instead of search results.", r.Type)}
	}
	var out []SearchResult
	if r.Web != nil {
		for _, w := range r.Web.Results {
			out = append(out, SearchResult{Title: w.Title, URL: w.URL, Snippet: w.Description})
		}
	}
	return out, nil
}

// searxng asks a SearXNG instance's JSON API: GET <base>/search?q=&format=json;
// the answer's results hold title, url and content. SearXNG has no count
// parameter (a page is about 10-20 results), so the first count are kept.
type searxng struct {
	guard  *netguard.Guard
	search string
	ua     string
}

// NewSearXNG returns the SearXNG backend at baseURL. Its requests go
// through guard, which must trust baseURL's host when that is a private or
// loopback address (netguard.TrustHosts; see SearXNGGuard).
func NewSearXNG(guard *netguard.Guard, baseURL string, opts ...Option) (SearchProvider, error) {
	cfg := newConfig(opts)
	u, err := guard.CheckURL(baseURL)
	if err != nil {
		return nil, fmt.Errorf("failed to use SearXNG base URL %q: %w", baseURL, err)
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("failed to use SearXNG base URL %q: it has a query", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/search"
	u.RawPath = ""
	return &searxng{guard: guard, search: u.String(), ua: cfg.userAgent}, nil
}

// SearXNGGuard returns the guard of a SearXNG backend at baseURL: a default
// guard that trusts baseURL's host, since an instance in the cluster or
// beside picobot serve has a private or loopback address. opts come first
// (tests add a resolver).
func SearXNGGuard(baseURL string, opts ...netguard.Option) *netguard.Guard {
	if u, err := url.Parse(baseURL); err == nil && u.Hostname() != "" {
		opts = append(opts, netguard.TrustHosts(u.Hostname()))
	}
	return netguard.New(opts...)
}

func (s *searxng) Name() string { return "searxng" }

// searxngResponse is the part of SearXNG's JSON answer web_search reads.
type searxngResponse struct {
	Query   *string `json:"query"`
	Results []struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

func (s *searxng) Search(ctx context.Context, query string, count int) ([]SearchResult, error) {
	target := s.search + "?" + url.Values{"q": {query}, "format": {"json"}}.Encode()
	header := http.Header{"Accept": {"application/json"}, "User-Agent": {s.ua}}
	resp, err := searchGet(ctx, s.guard, target, header)
	if err != nil {
		return nil, err
	}
	body := resp.body
	if resp.StatusCode == http.StatusForbidden {
		return nil, &SearchError{Status: resp.StatusCode, Message: "SearXNG refused the JSON format (HTTP 403 Forbidden): its settings.yml must list json in search.formats. The agent's owner must fix the instance; do not retry."}
	}
	if resp.StatusCode != http.StatusOK {
		auth := resp.StatusCode == http.StatusUnauthorized
		return nil, statusError("SearXNG", resp, "", auth,
			"Something in front of the SearXNG instance asks for credentials, which web_search does not send; its owner must open it to the agent. Do not retry.")
	}
	var r searxngResponse
	if err := decodeJSON(resp, body, &r); err != nil {
		return nil, &SearchError{Status: resp.StatusCode, Message: "SearXNG answered with " + err.Error()}
	}
	if r.Query == nil || r.Results == nil {
		return nil, &SearchError{Status: resp.StatusCode, Message: "SearXNG answered with JSON that has no query and results; is spec.tools.webSearch.baseURL a SearXNG instance?"}
	}
	out := make([]SearchResult, 0, min(count, len(r.Results)))
	for _, x := range r.Results {
		if len(out) == count {
			break
		}
		out = append(out, SearchResult{Title: x.Title, URL: x.URL, Snippet: x.Content})
	}
	return out, nil
}

// answer is a search service's answer, read in full.
type answer struct {
	StatusCode int
	Status     string
	Header     http.Header
	body       []byte
}

// searchGet sends a GET through guard and reads a bounded body. Redirects
// are not followed (a search API does not redirect; one that does is
// misconfigured).
func searchGet(ctx context.Context, guard *netguard.Guard, target string, header http.Header) (*answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build request: %w", err)
	}
	req.Header = header
	resp, err := guard.Client(searchTimeout).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, more, err := readLimited(resp.Body, maxSearchBytes)
	if err != nil {
		return nil, fmt.Errorf("failed to read the answer: %w", err)
	}
	if more && resp.StatusCode == http.StatusOK {
		return nil, &SearchError{Status: resp.StatusCode, Message: fmt.Sprintf("the answer is larger than %d MiB, which no search result page is.", maxSearchBytes>>20)}
	}
	return &answer{StatusCode: resp.StatusCode, Status: resp.Status, Header: resp.Header, body: body}, nil
}

// statusError words a non-200 answer: what the status means for the model
// (retry later, or do not retry), with the service's own detail.
func statusError(service string, resp *answer, detail string, auth bool, authHint string) error {
	msg := fmt.Sprintf("%s answered HTTP %s", service, resp.Status)
	if detail != "" {
		msg += " (" + detail + ")"
	}
	switch code := resp.StatusCode; {
	case auth:
		msg += ". " + authHint
	case code == http.StatusTooManyRequests:
		msg += ": the search rate limit is reached."
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if _, err := strconv.Atoi(ra); err == nil {
				ra += " seconds"
			}
			msg += " Retry after " + ra + "."
		} else {
			msg += " Wait before searching again."
		}
	case code >= 500:
		msg += ": the search service failed. Try again later."
	case code >= 300 && code < 400:
		msg += fmt.Sprintf(" redirecting to %q; a search API does not redirect, so spec.tools.webSearch points at the wrong place. Do not retry.", resp.Header.Get("Location"))
	default:
		msg += ". Do not retry this search unchanged."
	}
	return &SearchError{Status: resp.StatusCode, Message: msg}
}

// decodeJSON decodes body into v, explaining what came instead of JSON.
func decodeJSON(resp *answer, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if mt == "" {
			mt = "no content type"
		}
		return fmt.Errorf("a body that is not its JSON format (%s, %d bytes: %w). Try again later; if it persists the agent's owner must check spec.tools.webSearch", mt, len(body), err)
	}
	return nil
}
