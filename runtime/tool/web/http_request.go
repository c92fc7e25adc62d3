package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/tool"
)

// httpRequestArgs are the arguments of http_request.
type httpRequestArgs struct {
	Method  string            `json:"method,omitempty" jsonschema:"HTTP method; default GET"`
	URL     string            `json:"url" jsonschema:"absolute http:// or https:// URL"`
	Headers map[string]string `json:"headers,omitempty" jsonschema:"request headers, name to value"`
	Body    string            `json:"body,omitempty" jsonschema:"request body (for POST, PUT, PATCH)"`
	Timeout int               `json:"timeout,omitempty" jsonschema:"timeout in seconds; default 30, max 120"`
}

const (
	defaultHTTPTimeout = 30
	maxHTTPTimeout     = 120
	// maxHTTPBodyBytes bounds what is read of a response: MaxChars characters
	// of up to four bytes each, plus one to see whether there was more.
	maxHTTPBodyBytes = 4 * MaxChars
)

// NewHTTPRequest returns the http_request tool: one request through guard, the
// answer (status, a few headers, the body) returned as is. It is for APIs;
// web_fetch is the better choice for reading pages.
func NewHTTPRequest(guard *netguard.Guard, opts ...Option) tool.Tool {
	cfg := newConfig(opts)
	h := &httpRequest{guard: guard, cfg: cfg}
	return tool.New("http_request",
		"Send an HTTP request (GET, POST, PUT, DELETE, PATCH) to a public http(s) URL and return the status, "+
			"content-type/length/location headers and the body (up to 50,000 characters). "+
			"Use it for APIs; use web_fetch to read web pages. Redirects are not followed: a 3xx answer is returned with its Location. "+
			"Local, private and cloud-metadata addresses are refused.",
		h.run,
		tool.ReadOnly(),
		tool.Enum("method", "GET", "POST", "PUT", "DELETE", "PATCH"),
		tool.Range("timeout", tool.Bound(1), tool.Bound(maxHTTPTimeout)),
	)
}

type httpRequest struct {
	guard *netguard.Guard
	cfg   config
}

func (h *httpRequest) run(ctx context.Context, _ tool.Env, args httpRequestArgs) (tool.Result, error) {
	u, err := h.guard.CheckURL(args.URL)
	if err != nil {
		return tool.Errorf("error: %v. http_request only reaches public http(s) URLs.", err), nil
	}
	method := args.Method
	if method == "" {
		method = http.MethodGet
	}
	timeout := time.Duration(args.Timeout) * time.Second
	if args.Timeout == 0 {
		timeout = defaultHTTPTimeout * time.Second
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	for k, v := range args.Headers {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return tool.Errorf("error: header %q: %q is not a valid HTTP header; fix or drop it and call again.", k, v), nil
		}
	}
	var body io.Reader
	if args.Body != "" {
		body = strings.NewReader(args.Body)
	}
	req, err := http.NewRequestWithContext(reqCtx, method, u.String(), body)
	if err != nil {
		return tool.Errorf("error: failed to build request: %v", err), nil
	}
	req.Header.Set("User-Agent", h.cfg.userAgent)
	for k, v := range args.Headers {
		req.Header.Set(k, v)
	}
	if args.Body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", guessContentType(args.Body))
	}

	resp, err := h.guard.Client(timeout).Do(req)
	if err != nil {
		return requestError(ctx, "http_request", u.String(), timeout, err), nil
	}
	defer func() { _ = resp.Body.Close() }()
	raw, more, err := readLimited(resp.Body, maxHTTPBodyBytes)
	if err != nil {
		return requestError(ctx, "http_request", u.String(), timeout, fmt.Errorf("failed to read response body: %w", err)), nil
	}

	var b strings.Builder
	writeResponseHead(&b, resp)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		b.WriteString(redirectNote(h.guard, "http_request", u, resp))
		b.WriteString("\n")
	}
	writeResponseBody(&b, u.String(), resp.Header.Get("Content-Type"), raw, more)
	return tool.Text(b.String()), nil
}

// writeResponseHead writes the status line and the headers the model sees.
func writeResponseHead(b *strings.Builder, resp *http.Response) {
	fmt.Fprintf(b, "%s %s\n", resp.Proto, resp.Status)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		fmt.Fprintf(b, "content-type: %s\n", ct)
	}
	if cl := resp.Header.Get("Content-Length"); cl != "" {
		fmt.Fprintf(b, "content-length: %s\n", cl)
	} else if resp.ContentLength >= 0 {
		fmt.Fprintf(b, "content-length: %d\n", resp.ContentLength)
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		fmt.Fprintf(b, "location: %s\n", loc)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		fmt.Fprintf(b, "retry-after: %s\n", ra)
	}
	b.WriteString("\n")
}

// writeResponseBody writes the body as untrusted text, or a note in its place.
func writeResponseBody(b *strings.Builder, target, contentType string, raw []byte, more bool) {
	switch {
	case len(raw) == 0:
		b.WriteString("(empty body)")
	case !utf8.Valid(raw) && !isTextual(contentType):
		size := strconv.Itoa(len(raw))
		if more {
			size = "more than " + size
		}
		fmt.Fprintf(b, "(binary body of %s bytes, not shown)", size)
	default:
		text, cut := truncate(strings.ToValidUTF8(string(raw), "\uFFFD"), MaxChars)
		b.WriteString(WrapUntrusted(target, text))
		if cut || more {
			fmt.Fprintf(b, "\n[body cut at %d characters; the rest was not read]", utf8.RuneCountInString(text))
		}
	}
}

// guessContentType labels a body the call sent without a Content-Type: JSON
// when it parses as JSON, plain text otherwise. Servers reject unlabelled
// bodies more often than mislabelled ones.
func guessContentType(body string) string {
	t := strings.TrimSpace(body)
	if (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Valid([]byte(t)) {
		return "application/json"
	}
	return "text/plain; charset=utf-8"
}

// isTextual reports whether a content type is text a model can read.
func isTextual(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"),
		strings.HasSuffix(mt, "+yaml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/javascript", "application/ecmascript",
		"application/x-javascript", "application/x-www-form-urlencoded", "application/yaml",
		"application/x-yaml", "application/toml", "application/x-sh", "application/graphql",
		"application/x-ndjson", "application/jsonl", "application/csv", "application/sql":
		return true
	}
	return false
}
