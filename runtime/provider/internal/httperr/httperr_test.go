package httperr

import (
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{name: "none", want: 0},
		{name: "seconds", header: map[string]string{"Retry-After": "2"}, want: 2 * time.Second},
		{name: "fractional seconds", header: map[string]string{"Retry-After": "1.5"}, want: 1500 * time.Millisecond},
		{name: "HTTP date", header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second},
		{name: "date in the past", header: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, want: 0},
		{name: "milliseconds win", header: map[string]string{"Retry-After": "9", "Retry-After-Ms": "250"}, want: 250 * time.Millisecond},
		{name: "lower-case milliseconds", header: map[string]string{"retry-after-ms": "1200.5"}, want: 1200500 * time.Microsecond},
		{name: "bad milliseconds fall back", header: map[string]string{"Retry-After-Ms": "soon", "Retry-After": "3"}, want: 3 * time.Second},
		{name: "negative", header: map[string]string{"Retry-After": "-4"}, want: 0},
		{name: "garbage", header: map[string]string{"Retry-After": "tomorrow"}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			NewWithT(t).Expect(RetryAfter(h, now)).To(Equal(tt.want))
		})
	}
}

func TestMessage(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "openai", body: `{"error":{"message":"Rate limit reached","type":"requests"}}`, want: "Rate limit reached"},
		{name: "anthropic", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, want: "Overloaded"},
		{name: "string error", body: `{"error":"model not found"}`, want: "model not found"},
		{name: "top-level message", body: `{"object":"error","message":"maximum context length is 4096","code":400}`, want: "maximum context length is 4096"},
		{name: "detail", body: `{"detail":"Not authenticated"}`, want: "Not authenticated"},
		{name: "unknown JSON", body: `{"x":1}`, want: "Service Unavailable"},
		{name: "HTML", body: "  <html>502 Bad Gateway</html>\n", want: "<html>502 Bad Gateway</html>"},
		{name: "empty", body: "", want: "Service Unavailable"},
		{name: "long text is cut", body: strings.Repeat("é", 400), want: strings.Repeat("é", 256) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(Message([]byte(tt.body), http.StatusServiceUnavailable)).To(Equal(tt.want))
		})
	}
}
