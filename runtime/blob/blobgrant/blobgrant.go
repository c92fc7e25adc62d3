// Package blobgrant is the blob grant service: it gives session pods, which
// hold no S3 credential, presigned S3 requests for keys under their own
// tenant's prefix ("tenants/<namespace>/"), and lists that prefix for them.
// The gateway serves it in the system namespace, with the S3 credentials
// it already has (runtime/blob/remoteblob is the client).
//
// A caller proves who it is with a projected ServiceAccount token of
// audience remoteblob.Audience, which the service checks with a TokenReview
// against the API server: the token must be valid now, for that audience,
// and belong to a session pod's ServiceAccount
// (system:serviceaccount:<namespace>:picobot-agent-<agent>). The namespace
// in that name is the tenant. A reviewed identity is kept for up to
// DefaultCacheTTL (reviewCache), so a pod's burst of requests costs one
// review. Everything else about a request (its key, its content) is checked
// against that tenant, and S3's signature check makes a grant good for
// exactly one method, key and content.
package blobgrant

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/remoteblob"
	"github.com/picobot/picobot/runtime/blob/s3blob"
)

const (
	// DefaultTTL is how long a grant is valid. A pod uses it at once; S3
	// checks the expiry when a request starts, so a long upload is not cut.
	DefaultTTL = 5 * time.Minute
	// maxRequestBody bounds a grant request (a key and at most 2 KiB of
	// metadata).
	maxRequestBody = 16 << 10
	// serviceAccountUser starts the user name of a ServiceAccount token.
	serviceAccountUser = "system:serviceaccount:"
	// DefaultCacheTTL is how long a token's reviewed identity is used
	// without asking again: the longest a revoked token (its pod or
	// ServiceAccount deleted) still gets grants.
	DefaultCacheTTL = 30 * time.Second
	// DefaultCacheSize bounds the reviewed tokens kept (a few hundred
	// bytes each, a few MB in all); the least recently used goes first.
	DefaultCacheSize = 10_000
)

// Presigner signs S3 requests with the service's credentials;
// *s3blob.Store is one.
type Presigner interface {
	PresignPut(ctx context.Context, key string, size int64, md5 []byte, opts blob.PutOptions, ttl time.Duration) (s3blob.Presigned, error)
	PresignGetRequest(ctx context.Context, key string, ttl time.Duration) (s3blob.Presigned, error)
	PresignHead(ctx context.Context, key string, ttl time.Duration) (s3blob.Presigned, error)
	PresignDelete(ctx context.Context, key string, ttl time.Duration) (s3blob.Presigned, error)
	List(ctx context.Context, prefix string, limit int) ([]blob.Object, error)
}

// TokenReviewer creates TokenReviews; the client-go
// AuthenticationV1().TokenReviews() is one.
type TokenReviewer interface {
	Create(ctx context.Context, review *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// Config builds a Server.
type Config struct {
	Reviews TokenReviewer
	Blobs   Presigner
	// TTL of grants; DefaultTTL when zero.
	TTL time.Duration
	// CacheTTL is how long a reviewed token's identity is kept (never past
	// the token's expiry); DefaultCacheTTL when zero, no cache when
	// negative.
	CacheTTL time.Duration
	// CacheSize bounds the tokens kept; DefaultCacheSize when zero.
	CacheSize int
	// Clock tells the cache's time; the real clock when nil.
	Clock clock.PassiveClock
	Log   *slog.Logger
}

// Server is the grant service's http.Handler.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	reviews *reviewCache // nil: every request is reviewed
}

// New builds a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Reviews == nil || cfg.Blobs == nil {
		return nil, errors.New("failed to configure the blob grant service: a token reviewer and an S3 store are needed")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	if cfg.CacheTTL >= 0 {
		s.reviews = newReviewCache(cfg.CacheTTL, cfg.CacheSize, cfg.Clock)
	}
	s.mux.HandleFunc("POST "+remoteblob.PathGrant, s.grant)
	s.mux.HandleFunc("GET "+remoteblob.PathList, s.list)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// refusal is an answer other than 200, with the message the caller sees.
type refusal struct {
	status int
	code   string
	msg    string
}

func (e *refusal) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *refusal {
	return &refusal{status: status, msg: fmt.Sprintf(format, args...)}
}

// keyRefusal maps a blob error of a key or its options to its code.
func keyRefusal(err error) *refusal {
	r := refuse(http.StatusBadRequest, "%s", err.Error())
	switch {
	case errors.Is(err, blob.ErrInvalidKey):
		r.code = remoteblob.CodeInvalidKey
	case errors.Is(err, blob.ErrInvalidOptions):
		r.code = remoteblob.CodeInvalidOptions
	case errors.Is(err, blob.ErrTooLarge):
		r.status, r.code = http.StatusRequestEntityTooLarge, remoteblob.CodeTooLarge
	default:
		return nil
	}
	return r
}

func (s *Server) grant(w http.ResponseWriter, r *http.Request) {
	tenant, ref := s.authenticate(r)
	if ref != nil {
		s.answer(w, r, tenant, ref, nil)
		return
	}
	var req remoteblob.GrantRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.answer(w, r, tenant, refuse(http.StatusBadRequest, "invalid grant request: %s", err.Error()), nil)
		return
	}
	if ref := ownKey(tenant, req.Key); ref != nil {
		s.answer(w, r, tenant, ref, nil)
		return
	}
	p, err := s.presign(r.Context(), req)
	if err != nil {
		ref := keyRefusal(err)
		if ref == nil {
			s.cfg.Log.Error("Failed to presign a blob request", "tenant", tenant, "op", req.Op, "err", err)
			ref = refuse(http.StatusBadGateway, "failed to presign the request")
		}
		s.answer(w, r, tenant, ref, nil)
		return
	}
	s.cfg.Log.Debug("Granted a blob request", "tenant", tenant, "op", req.Op, "key", req.Key)
	s.answer(w, r, tenant, nil, remoteblob.Grant{Method: p.Method, URL: p.URL, Header: p.Header, Expires: time.Now().Add(s.cfg.TTL)})
}

// presign signs the request the grant request asks for.
func (s *Server) presign(ctx context.Context, req remoteblob.GrantRequest) (s3blob.Presigned, error) {
	if req.Op != remoteblob.OpPut && (req.Size != 0 || req.ContentMD5 != "" || req.ContentType != "" || req.Metadata != nil) {
		return s3blob.Presigned{}, fmt.Errorf("%w: size, content MD5, content type and metadata belong to a put, not a %s", blob.ErrInvalidOptions, req.Op)
	}
	switch req.Op {
	case remoteblob.OpGet:
		return s.cfg.Blobs.PresignGetRequest(ctx, req.Key, s.cfg.TTL)
	case remoteblob.OpHead:
		return s.cfg.Blobs.PresignHead(ctx, req.Key, s.cfg.TTL)
	case remoteblob.OpDelete:
		return s.cfg.Blobs.PresignDelete(ctx, req.Key, s.cfg.TTL)
	case remoteblob.OpPut:
		md5, err := base64.StdEncoding.DecodeString(req.ContentMD5)
		if err != nil {
			return s3blob.Presigned{}, fmt.Errorf("%w: content MD5 is not base64: %w", blob.ErrInvalidOptions, err)
		}
		return s.cfg.Blobs.PresignPut(ctx, req.Key, req.Size, md5, blob.PutOptions{ContentType: req.ContentType, Metadata: req.Metadata}, s.cfg.TTL)
	}
	return s3blob.Presigned{}, fmt.Errorf("%w: unknown operation %q (get, head, put, delete)", blob.ErrInvalidOptions, req.Op)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	tenant, ref := s.authenticate(r)
	if ref != nil {
		s.answer(w, r, tenant, ref, nil)
		return
	}
	q := r.URL.Query()
	prefix, limit := q.Get("prefix"), 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.answer(w, r, tenant, refuse(http.StatusBadRequest, "limit %q is not a count", v), nil)
			return
		}
		limit = n
	}
	if ref := ownPrefix(tenant, prefix); ref != nil {
		s.answer(w, r, tenant, ref, nil)
		return
	}
	objs, err := s.cfg.Blobs.List(r.Context(), prefix, limit)
	if err != nil {
		s.cfg.Log.Error("Failed to list blobs", "tenant", tenant, "err", err)
		s.answer(w, r, tenant, refuse(http.StatusBadGateway, "failed to list objects"), nil)
		return
	}
	out := remoteblob.ListResponse{Objects: make([]remoteblob.ListedObject, 0, len(objs))}
	for _, o := range objs {
		out.Objects = append(out.Objects, remoteblob.Listed(o))
	}
	s.answer(w, r, tenant, nil, out)
}

// ownKey refuses a key that is invalid or outside the tenant's prefix.
// ValidateKey refuses "..", "." and empty segments, backslashes and
// absolute keys, and the key goes to S3 as it is (the SDK escapes it for
// the path), so the prefix test is the whole story.
func ownKey(tenant, key string) *refusal {
	if err := blob.ValidateKey(key); err != nil {
		return keyRefusal(err)
	}
	if owner, ok := blob.TenantOf(key); !ok || owner != tenant {
		return refuse(http.StatusForbidden, "key %q is outside the prefix of tenant %q (tenants/%s/)", key, tenant, tenant)
	}
	return nil
}

// ownPrefix refuses a list prefix that is invalid or does not start with
// the tenant's prefix.
func ownPrefix(tenant, prefix string) *refusal {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return keyRefusal(err)
	}
	own, err := blob.TenantPrefix(tenant)
	if err != nil || !strings.HasPrefix(prefix, own) {
		return refuse(http.StatusForbidden, "prefix %q is outside the prefix of tenant %q (%s)", prefix, tenant, own)
	}
	return nil
}

// authenticate returns the tenant of the request's token: the namespace of
// a session pod's ServiceAccount, as the API server's TokenReview says.
func (s *Server) authenticate(r *http.Request) (string, *refusal) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return "", refuse(http.StatusUnauthorized, "a ServiceAccount token of audience %q is needed (Authorization: Bearer)", remoteblob.Audience)
	}
	user, ref := s.reviewedUser(r.Context(), token)
	if ref != nil {
		return "", ref
	}
	return sessionTenant(user)
}

// reviewedUser returns the user name a TokenReview gives token for the
// service's audience, from the cache when it was reviewed lately.
func (s *Server) reviewedUser(ctx context.Context, token string) (string, *refusal) {
	if user, ok := s.reviews.get(token); ok {
		return user, nil
	}
	review, err := s.cfg.Reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: token, Audiences: []string{remoteblob.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		s.cfg.Log.Error("Failed to review a blob token", "err", err)
		return "", refuse(http.StatusServiceUnavailable, "failed to review the token")
	}
	st := review.Status
	if !st.Authenticated || !slices.Contains(st.Audiences, remoteblob.Audience) {
		s.cfg.Log.Debug("Refused a blob token", "reason", st.Error)
		return "", refuse(http.StatusUnauthorized, "the token is not a valid token of audience %q", remoteblob.Audience)
	}
	s.reviews.add(token, st.User.Username)
	return st.User.Username, nil
}

// sessionTenant returns the namespace of user when it is a session pod's
// ServiceAccount (system:serviceaccount:<ns>:picobot-agent-<agent>) in a
// namespace that can be a tenant.
func sessionTenant(user string) (string, *refusal) {
	ns, sa, ok := strings.Cut(strings.TrimPrefix(user, serviceAccountUser), ":")
	if !strings.HasPrefix(user, serviceAccountUser) || !ok {
		return "", refuse(http.StatusForbidden, "user %q is not a ServiceAccount", user)
	}
	if !strings.HasPrefix(sa, remoteblob.ServiceAccountPrefix) {
		return "", refuse(http.StatusForbidden, "ServiceAccount %q of namespace %q is not a session pod's (%s<agent>)", sa, ns, remoteblob.ServiceAccountPrefix)
	}
	if err := blob.ValidateTenant(ns); err != nil {
		return "", refuse(http.StatusForbidden, "namespace %q is not a tenant: %s", ns, err.Error())
	}
	return ns, nil
}

// answer writes v as JSON, or the refusal; refusals are logged at debug
// level with the tenant, when known.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, tenant string, ref *refusal, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if ref != nil {
		s.cfg.Log.Debug("Refused a blob request", "path", r.URL.Path, "tenant", tenant, "status", ref.status, "reason", ref.msg)
		w.WriteHeader(ref.status)
		v = remoteblob.ErrorResponse{Error: ref.msg, Code: ref.code}
	}
	_ = json.NewEncoder(w).Encode(v)
}
