package s3blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/blob"
)

// captureClient is an HTTP client that records requests and answers them
// itself, so the SDK's request building is tested without a network.
type captureClient struct {
	mu      sync.Mutex
	reqs    []*http.Request
	bodies  []string
	respond func(*http.Request) *http.Response
}

func (c *captureClient) Do(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		_ = r.Body.Close()
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.bodies = append(c.bodies, string(body))
	c.mu.Unlock()
	resp := c.respond(r)
	resp.Request = r
	return resp, nil
}

func (c *captureClient) last() *http.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		return nil
	}
	return c.reqs[len(c.reqs)-1]
}

func response(status int, headers map[string]string, body string) *http.Response {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	return &http.Response{
		StatusCode:    status,
		Status:        http.StatusText(status),
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Proto:         "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
}

// okObject answers like S3 does for a successful HEAD, GET or PUT.
func okObject(*http.Request) *http.Response {
	return response(http.StatusOK, map[string]string{
		"Content-Type":   "text/plain",
		"ETag":           `"5d41402abc4b2a76b9719d911017c592"`,
		"Last-Modified":  "Mon, 30 Nov 2026 10:00:00 GMT",
		"Date":           "Mon, 30 Nov 2026 10:00:00 GMT",
		"Content-Length": "0",
	}, "")
}

func newCaptured(t *testing.T, cfg Config, respond func(*http.Request) *http.Response) (*Store, *captureClient) {
	t.Helper()
	c := &captureClient{respond: respond}
	cfg.HTTPClient = c
	if cfg.Bucket == "" {
		cfg.Bucket = "picobot-artifacts"
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// isolateAWSEnv keeps the developer's AWS settings out of the test and the
// SDK away from IMDS.
func isolateAWSEnv(t *testing.T) {
	for _, k := range []string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_S3_USE_PATH_STYLE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent/picobot-test-aws-config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/picobot-test-aws-credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func TestRequestURLs(t *testing.T) {
	isolateAWSEnv(t)
	const key = "tenants/acme/报告 a+b.pdf"
	const escapedKey = "/tenants/acme/%E6%8A%A5%E5%91%8A%20a%2Bb.pdf"
	tests := []struct {
		name     string
		cfg      Config
		wantHost string
		wantPath string
	}{
		{
			name:     "custom endpoint, path style",
			cfg:      Config{Endpoint: "http://127.0.0.1:9000", UsePathStyle: true},
			wantHost: "127.0.0.1:9000",
			wantPath: "/picobot-artifacts" + escapedKey,
		},
		{
			name:     "custom endpoint, virtual host",
			cfg:      Config{Endpoint: "https://s3.example.test:8443"},
			wantHost: "picobot-artifacts.s3.example.test:8443",
			wantPath: escapedKey,
		},
		{
			name:     "custom endpoint with a base path, path style",
			cfg:      Config{Endpoint: "https://gateway.example.test/storage", UsePathStyle: true},
			wantHost: "gateway.example.test",
			wantPath: "/storage/picobot-artifacts" + escapedKey,
		},
		{
			name:     "AWS, virtual host",
			cfg:      Config{Region: "eu-west-1"},
			wantHost: "picobot-artifacts.s3.eu-west-1.amazonaws.com",
			wantPath: escapedKey,
		},
		{
			name:     "AWS, path style",
			cfg:      Config{Region: "eu-west-1", UsePathStyle: true},
			wantHost: "s3.eu-west-1.amazonaws.com",
			wantPath: "/picobot-artifacts" + escapedKey,
		},
		{
			name:     "AWS, default region",
			cfg:      Config{},
			wantHost: "picobot-artifacts.s3.us-east-1.amazonaws.com",
			wantPath: escapedKey,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.cfg.AccessKeyID, tc.cfg.SecretAccessKey = "AKIDSTATIC", "secret"
			s, c := newCaptured(t, tc.cfg, okObject)
			ctx := context.Background()

			_, err := s.Head(ctx, key)
			g.Expect(err).NotTo(HaveOccurred())
			req := c.last()
			g.Expect(req.Method).To(Equal(http.MethodHead))
			g.Expect(req.URL.Host).To(Equal(tc.wantHost))
			g.Expect(req.URL.EscapedPath()).To(Equal(tc.wantPath))

			_, err = s.Put(ctx, key, strings.NewReader("hello"), 5, blob.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"Origin": "upload"}})
			g.Expect(err).NotTo(HaveOccurred())
			req = c.last()
			g.Expect(req.Method).To(Equal(http.MethodPut))
			g.Expect(req.URL.Host).To(Equal(tc.wantHost))
			g.Expect(req.URL.EscapedPath()).To(Equal(tc.wantPath))
		})
	}
}

// TestPutRequestIsPlain checks what S3-compatible servers need: a plain body
// with Content-Length and Content-MD5, no aws-chunked encoding or CRC trailer
// (the SDK's default since 2025, which older servers reject).
func TestPutRequestIsPlain(t *testing.T) {
	isolateAWSEnv(t)
	g := NewWithT(t)
	s, c := newCaptured(t, Config{Endpoint: "http://127.0.0.1:9000", UsePathStyle: true, AccessKeyID: "AKIDSTATIC", SecretAccessKey: "secret"}, okObject)
	obj, err := s.Put(context.Background(), "tenants/acme/hello.txt", strings.NewReader("hello"), 5, blob.PutOptions{ContentType: "text/plain", Metadata: map[string]string{"Origin": "upload"}})
	g.Expect(err).NotTo(HaveOccurred())
	req := c.last()
	g.Expect(req.Header.Get("Content-MD5")).To(Equal("XUFAKrxLKna5cZ2REBfFkg=="))
	g.Expect(req.Header.Get("Content-Type")).To(Equal("text/plain"))
	g.Expect(req.Header.Get("X-Amz-Meta-Origin")).To(Equal("upload"))
	g.Expect(req.Header.Get("Content-Encoding")).NotTo(ContainSubstring("aws-chunked"))
	g.Expect(req.Header.Get("X-Amz-Trailer")).To(BeEmpty())
	g.Expect(req.ContentLength).To(Equal(int64(5)))
	g.Expect(c.bodies[len(c.bodies)-1]).To(Equal("hello"))
	g.Expect(obj.ETag).To(Equal("5d41402abc4b2a76b9719d911017c592"))
	g.Expect(obj.ModTime.UTC().Format("2006-01-02T15:04:05")).To(Equal("2026-11-30T10:00:00"), "from the response's Date")
}

func TestCredentials(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		env       map[string]string
		wantKeyID string
		wantToken string
	}{
		{
			name:      "static",
			cfg:       Config{AccessKeyID: "AKIDSTATIC", SecretAccessKey: "secret"},
			env:       map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret"},
			wantKeyID: "AKIDSTATIC",
		},
		{
			name:      "static with session token",
			cfg:       Config{AccessKeyID: "ASIASTATIC", SecretAccessKey: "secret", SessionToken: "token-1"},
			wantKeyID: "ASIASTATIC",
			wantToken: "token-1",
		},
		{
			name:      "default chain",
			env:       map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret"},
			wantKeyID: "AKIDENV",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			isolateAWSEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			g := NewWithT(t)
			tc.cfg.Endpoint, tc.cfg.UsePathStyle = "http://127.0.0.1:9000", true
			s, c := newCaptured(t, tc.cfg, okObject)
			_, err := s.Head(context.Background(), "tenants/acme/x")
			g.Expect(err).NotTo(HaveOccurred())
			req := c.last()
			g.Expect(req.Header.Get("Authorization")).To(ContainSubstring("Credential=" + tc.wantKeyID + "/"))
			g.Expect(req.Header.Get("X-Amz-Security-Token")).To(Equal(tc.wantToken))
		})
	}
}

func TestErrorMapping(t *testing.T) {
	isolateAWSEnv(t)
	xmlError := func(code string) string {
		return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>m</Message></Error>`
	}
	tests := []struct {
		name         string
		status       int
		body         string
		wantNotFound bool
	}{
		{"GET NoSuchKey", http.StatusNotFound, xmlError("NoSuchKey"), true},
		{"HEAD 404 without body", http.StatusNotFound, "", true},
		{"NoSuchBucket", http.StatusNotFound, xmlError("NoSuchBucket"), false},
		{"AccessDenied", http.StatusForbidden, xmlError("AccessDenied"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s, _ := newCaptured(t, Config{Endpoint: "http://127.0.0.1:9000", UsePathStyle: true, AccessKeyID: "AKID", SecretAccessKey: "secret"},
				func(r *http.Request) *http.Response {
					if r.Method == http.MethodHead {
						return response(tc.status, nil, "")
					}
					return response(tc.status, map[string]string{"Content-Type": "application/xml"}, tc.body)
				})
			ctx := context.Background()
			var err error
			if tc.name == "HEAD 404 without body" {
				_, err = s.Head(ctx, "tenants/acme/x")
			} else {
				_, _, err = s.Get(ctx, "tenants/acme/x")
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(errors.Is(err, blob.ErrNotFound)).To(Equal(tc.wantNotFound), "%v", err)

			err = s.Delete(ctx, "tenants/acme/x")
			if tc.wantNotFound {
				g.Expect(err).NotTo(HaveOccurred(), "deleting a missing key is not an error")
			} else {
				g.Expect(err).To(HaveOccurred())
			}
		})
	}
}

func TestSizeLimitCheckedBeforeSending(t *testing.T) {
	isolateAWSEnv(t)
	s, c := newCaptured(t, Config{Endpoint: "http://127.0.0.1:9000", UsePathStyle: true, AccessKeyID: "AKID", SecretAccessKey: "secret", MaxObjectSize: 10}, okObject)
	tests := []struct {
		name    string
		r       io.Reader
		size    int64
		wantErr error
	}{
		{"declared over the limit", strings.NewReader("0123456789a"), 11, blob.ErrTooLarge},
		{"stream over the limit", streamOnly{strings.NewReader("0123456789a")}, -1, blob.ErrTooLarge},
		{"declared over S3's limit", strings.NewReader("x"), blob.DefaultMaxObjectSize + 1, blob.ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := s.Put(context.Background(), "tenants/acme/big", tc.r, tc.size, blob.PutOptions{})
			g.Expect(errors.Is(err, tc.wantErr)).To(BeTrue(), "put: %v", err)
			g.Expect(c.last()).To(BeNil(), "nothing is sent")
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	isolateAWSEnv(t)
	tests := map[string]Config{
		"no bucket":                  {},
		"short bucket":               {Bucket: "ab"},
		"upper-case bucket":          {Bucket: "Picobot"},
		"bucket with underscore":     {Bucket: "pico_bot"},
		"bucket ending in a dash":    {Bucket: "picobot-"},
		"bucket with ..":             {Bucket: "pico..bot"},
		"endpoint without scheme":    {Bucket: "picobot", Endpoint: "127.0.0.1:9000"},
		"endpoint with other scheme": {Bucket: "picobot", Endpoint: "ftp://127.0.0.1"},
		"secret without key id":      {Bucket: "picobot", SecretAccessKey: "secret"},
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(context.Background(), cfg)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring("failed to configure S3 store")))
		})
	}
}

func TestConfigStringHidesSecrets(t *testing.T) {
	g := NewWithT(t)
	cfg := Config{Bucket: "picobot", AccessKeyID: "AKIDPUBLIC", SecretAccessKey: "very-secret", SessionToken: "token-secret"}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprint(&cfg)} {
		g.Expect(s).To(ContainSubstring("AKIDPUBLIC"))
		g.Expect(s).NotTo(ContainSubstring("very-secret"))
		g.Expect(s).NotTo(ContainSubstring("token-secret"))
	}
}
