// Package httperr holds the HTTP error details both provider packages read the
// same way: the server's requested wait and the error message of a JSON error
// body. It exists so the openai and anthropic packages agree on them.
package httperr

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryAfter reads the wait a server asked for in an error response, so the
// retry layer can honour it instead of guessing. retry-after-ms (OpenAI,
// Anthropic) wins over Retry-After, which may be seconds or an HTTP-date
// (RFC 9110 §10.2.3); now anchors the date form. Zero means no usable header.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && !math.IsInf(ms, 0) {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || math.IsInf(secs, 0) || math.IsNaN(secs) {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// Message extracts the error text of an API error body, so a StatusError
// always says something useful: error.message (OpenAI, Anthropic), a string
// error (Ollama), a top-level message (vLLM) or detail (FastAPI servers),
// else the trimmed non-JSON body (a proxy's page), else the status text. The
// body is the server's reply and carries no request credentials.
func Message(body []byte, status int) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(body, &env) == nil {
		var obj struct {
			Message string `json:"message"`
		}
		var str string
		switch {
		case json.Unmarshal(env.Error, &obj) == nil && obj.Message != "":
			return obj.Message
		case json.Unmarshal(env.Error, &str) == nil && str != "":
			return str
		case env.Message != "":
			return env.Message
		case env.Detail != nil:
			if s, ok := env.Detail.(string); ok {
				return s
			}
			if b, err := json.Marshal(env.Detail); err == nil {
				return truncate(string(b))
			}
		}
		return http.StatusText(status)
	}
	if s := strings.TrimSpace(string(body)); s != "" {
		return truncate(s)
	}
	return http.StatusText(status)
}

func truncate(s string) string {
	const maxLen = 512
	if len(s) > maxLen {
		return strings.ToValidUTF8(s[:maxLen], "") + "…"
	}
	return s
}
