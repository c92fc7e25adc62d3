package remoteblob

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/blob"
)

// metaPrefix starts S3's user metadata headers.
const metaPrefix = "X-Amz-Meta-"

// Config says where the grant service is and where the token lies.
type Config struct {
	// URL is the grant service's base URL (EnvURL), e.g.
	// "http://picobot-gateway.picobot-system.svc:8090".
	URL string
	// TokenFile holds the projected ServiceAccount token; TokenFile when
	// empty. It is read for every request, so the kubelet's renewals apply.
	TokenFile string
	// HTTPClient reaches the grant service and S3; one that follows no
	// redirect when nil.
	HTTPClient *http.Client
	// MaxObjectSize refuses larger objects with blob.ErrTooLarge before
	// asking for a grant; 0 means blob.DefaultMaxObjectSize.
	MaxObjectSize int64
	// TempDir is where Put spools bodies that are not seekable.
	TempDir string
}

// Store is a blob.Store over presigned requests. It holds no S3 credential.
type Store struct {
	base      *url.URL
	tokenFile string
	http      *http.Client
	maxSize   int64
	tempDir   string
}

var _ blob.Store = (*Store)(nil)

// New builds a Store; it contacts nothing.
func New(cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("failed to configure the blob grant client: %s %q is not an http(s) URL", EnvURL, cfg.URL)
	}
	s := &Store{base: u, tokenFile: cfg.TokenFile, http: cfg.HTTPClient, maxSize: cfg.MaxObjectSize, tempDir: cfg.TempDir}
	if s.tokenFile == "" {
		s.tokenFile = TokenFile
	}
	if s.http == nil {
		// S3 redirects (wrong region) are errors to report, not requests to
		// replay elsewhere.
		s.http = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if s.maxSize <= 0 || s.maxSize > blob.DefaultMaxObjectSize {
		s.maxSize = blob.DefaultMaxObjectSize
	}
	return s, nil
}

// Close releases idle connections.
func (s *Store) Close() error {
	s.http.CloseIdleConnections()
	return nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts blob.PutOptions) (blob.Object, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	opts, err := opts.Normalize()
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	if size > s.maxSize {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w: %d bytes, limit %d", key, blob.ErrTooLarge, size, s.maxSize)
	}
	body, err := blob.SpoolBody(ctx, r, size, s.maxSize, blob.DefaultSpoolMemory, s.tempDir)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	defer func() { _ = body.Close() }()
	g, err := s.grant(ctx, GrantRequest{Op: OpPut, Key: key, Size: body.Size, ContentMD5: base64.StdEncoding.EncodeToString(body.MD5),
		ContentType: opts.ContentType, Metadata: opts.Metadata})
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	var rd io.Reader = io.NopCloser(body)
	if body.Size == 0 {
		rd = http.NoBody
	}
	resp, err := s.send(ctx, g, rd, body.Size)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return blob.Object{}, fmt.Errorf("failed to put object %q: %w", key, s3Error(resp))
	}
	modTime, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		modTime = time.Now()
	}
	return blob.Object{Key: key, Size: body.Size, ContentType: opts.ContentType, ModTime: modTime,
		ETag: strings.Trim(resp.Header.Get("ETag"), `"`), Metadata: blob.CloneMetadata(opts.Metadata)}, nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Object, error) {
	resp, err := s.read(ctx, OpGet, key)
	if err != nil {
		return nil, blob.Object{}, fmt.Errorf("failed to get object %q: %w", key, err)
	}
	return resp.Body, object(key, resp), nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, key string) (blob.Object, error) {
	resp, err := s.read(ctx, OpHead, key)
	if err != nil {
		return blob.Object{}, fmt.Errorf("failed to head object %q: %w", key, err)
	}
	drain(resp)
	return object(key, resp), nil
}

// read sends a granted GET or HEAD; the caller closes the body of the 200
// it returns. 404 is blob.ErrNotFound.
func (s *Store) read(ctx context.Context, op Op, key string) (*http.Response, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, err
	}
	g, err := s.grant(ctx, GrantRequest{Op: op, Key: key})
	if err != nil {
		return nil, err
	}
	resp, err := s.send(ctx, g, nil, 0)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp, nil
	case http.StatusNotFound:
		drain(resp)
		return nil, blob.ErrNotFound
	default:
		defer drain(resp)
		return nil, s3Error(resp)
	}
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	g, err := s.grant(ctx, GrantRequest{Op: OpDelete, Key: key})
	if err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	resp, err := s.send(ctx, g, nil, 0)
	if err != nil {
		return fmt.Errorf("failed to delete object %q: %w", key, err)
	}
	defer drain(resp)
	// S3 answers 204 for a missing key; some compatible servers answer 404.
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent, http.StatusNotFound:
		return nil
	}
	return fmt.Errorf("failed to delete object %q: %w", key, s3Error(resp))
}

// List implements blob.Store: the grant service lists, and only under the
// caller's tenant prefix.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]blob.Object, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	q := url.Values{"prefix": {prefix}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out ListResponse
	if err := s.call(ctx, http.MethodGet, PathList+"?"+q.Encode(), nil, &out); err != nil {
		return nil, fmt.Errorf("failed to list objects under %q: %w", prefix, err)
	}
	objs := make([]blob.Object, 0, len(out.Objects))
	for _, o := range out.Objects {
		objs = append(objs, blob.Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag})
	}
	return objs, nil
}

// grant asks the grant service for one presigned request.
func (s *Store) grant(ctx context.Context, req GrantRequest) (Grant, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Grant{}, fmt.Errorf("failed to encode the grant request: %w", err)
	}
	var g Grant
	if err := s.call(ctx, http.MethodPost, PathGrant, body, &g); err != nil {
		return Grant{}, err
	}
	return g, nil
}

// call sends one authenticated request to the grant service and decodes
// its JSON answer into out.
func (s *Store) call(ctx context.Context, method, path string, body []byte, out any) error {
	token, err := os.ReadFile(s.tokenFile)
	if err != nil {
		return fmt.Errorf("failed to read the blob token: %w", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(s.base.String(), "/")+path, rd)
	if err != nil {
		return fmt.Errorf("failed to build the grant request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("failed to reach the blob grant service: %w", err)
	}
	defer drain(resp)
	dec := json.NewDecoder(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		var e ErrorResponse
		if err := dec.Decode(&e); err != nil || e.Error == "" {
			return fmt.Errorf("the blob grant service answered %s", resp.Status)
		}
		return refusal(resp.StatusCode, e)
	}
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("failed to decode the blob grant service's answer: %w", err)
	}
	return nil
}

// refusal turns a refusal of the grant service into an error that wraps the
// matching blob sentinel.
func refusal(status int, e ErrorResponse) error {
	var sentinel error
	switch e.Code {
	case CodeInvalidKey:
		sentinel = blob.ErrInvalidKey
	case CodeInvalidOptions:
		sentinel = blob.ErrInvalidOptions
	case CodeTooLarge:
		sentinel = blob.ErrTooLarge
	default:
		return fmt.Errorf("the blob grant service refused (%d): %s", status, e.Error)
	}
	return fmt.Errorf("%w: the blob grant service refused (%d): %s", sentinel, status, e.Error)
}

// send sends a granted request with exactly its signed headers.
func (s *Store) send(ctx context.Context, g Grant, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, g.Method, g.URL, body)
	if err != nil {
		return nil, fmt.Errorf("failed to build the presigned request: %w", err)
	}
	for k, vs := range g.Header {
		if strings.EqualFold(k, "Content-Length") {
			continue // req.ContentLength sends it
		}
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	req.ContentLength = size
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to send the presigned request: %w", err)
	}
	return resp, nil
}

// object reads an object's attributes from S3's response headers.
func object(key string, resp *http.Response) blob.Object {
	obj := blob.Object{Key: key, Size: resp.ContentLength, ContentType: resp.Header.Get("Content-Type"),
		ETag: strings.Trim(resp.Header.Get("ETag"), `"`)}
	if obj.ContentType == "" {
		obj.ContentType = blob.DefaultContentType
	}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		obj.ModTime = t
	}
	for k, vs := range resp.Header {
		if name, ok := strings.CutPrefix(k, metaPrefix); ok && len(vs) > 0 {
			if obj.Metadata == nil {
				obj.Metadata = map[string]string{}
			}
			obj.Metadata[strings.ToLower(name)] = vs[0]
		}
	}
	return obj
}

// s3Error describes a refusal of S3 from its XML error body.
func s3Error(resp *http.Response) error {
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	if xml.Unmarshal(b, &e) != nil || e.Code == "" {
		return fmt.Errorf("S3 answered %s", resp.Status)
	}
	return fmt.Errorf("S3 answered %s: %s: %s", resp.Status, e.Code, e.Message)
}

// drain reads what is left of a small body so the connection is reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
