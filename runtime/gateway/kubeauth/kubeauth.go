// Package kubeauth authenticates gateway clients with API keys kept as
// Kubernetes Secrets (cluster mode): a Secret labelled
// gateway.picobot.io/api-key: "true" in a tenant's namespace holds a token
// under the key "key", and a request bearing that token acts for that
// namespace.
//
// Secrets are watched across namespaces with a client-go informer whose
// transform replaces each Secret's data by the SHA-256 of its token before
// it is cached, so plaintext tokens never stay in the gateway's memory.
// Creating, rotating (changing "key") or deleting a Secret takes effect as soon
// as the watch delivers it.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/picobot/picobot/runtime/gateway"
)

// Names of the Secret API.
const (
	// LabelAPIKey marks a Secret as a gateway API key (value "true").
	LabelAPIKey = "gateway.picobot.io/api-key"
	// AnnotationRateLimit overrides the gateway's default rate limit for the
	// key: "<requests>/<s|m|h>[,burst=<n>]" (e.g. "600/m,burst=20") or
	// "unlimited". An invalid value is logged and the default applies.
	AnnotationRateLimit = "gateway.picobot.io/rate-limit"
	// TokenKey is the data key holding the token.
	TokenKey = "key"
	// hashKey is where the transform keeps the token's SHA-256. The ':' is
	// not allowed in Secret data keys, so a Secret from the API server can
	// never look already transformed.
	hashKey = "sha256:" + TokenKey
)

// SecretKeys is a gateway.Authenticator over API-key Secrets. Start it (it is
// a controller-runtime manager.Runnable) and wait for HasSynced before
// serving.
type SecretKeys struct {
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
	log      *slog.Logger

	mu sync.RWMutex
	// byHash maps a token's hash to the keys holding that token: one
	// normally; a token given to several Secrets is refused, since it could
	// name several tenants.
	byHash   map[[sha256.Size]byte]map[string]gateway.Principal
	bySecret map[string][sha256.Size]byte // namespace/name -> hash
}

// New returns an authenticator watching API-key Secrets in every namespace
// (the gateway's service account needs list and watch on Secrets; only
// labelled ones are requested).
func New(cs kubernetes.Interface, log *slog.Logger) (*SecretKeys, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &SecretKeys{log: log, byHash: map[[sha256.Size]byte]map[string]gateway.Principal{}, bySecret: map[string][sha256.Size]byte{}}
	s.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelAPIKey + "=true" }),
		informers.WithTransform(hashOnly))
	s.informer = s.factory.Core().V1().Secrets().Informer()
	_, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.upsert(obj) },
		UpdateFunc: func(_, obj any) { s.upsert(obj) },
		DeleteFunc: s.remove,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to watch API-key Secrets: %w", err)
	}
	return s, nil
}

// hashOnly is the informer's transform: what is cached of a Secret is its
// identity, our label and annotation, and the SHA-256 of its token.
func hashOnly(obj any) (any, error) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil // tombstones pass through
	}
	if _, done := sec.Data[hashKey]; done {
		return obj, nil // transforms may run more than once on an object
	}
	out := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec.Name, Namespace: sec.Namespace, UID: sec.UID,
		ResourceVersion: sec.ResourceVersion, Labels: map[string]string{LabelAPIKey: sec.Labels[LabelAPIKey]}}}
	if v, ok := sec.Annotations[AnnotationRateLimit]; ok {
		out.Annotations = map[string]string{AnnotationRateLimit: v}
	}
	if tok := sec.Data[TokenKey]; len(tok) > 0 {
		h := sha256.Sum256(tok)
		out.Data = map[string][]byte{hashKey: h[:]}
	}
	return out, nil
}

// Start runs the watch until ctx ends.
func (s *SecretKeys) Start(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	<-ctx.Done()
	s.factory.Shutdown()
	return nil
}

// NeedLeaderElection tells a controller-runtime manager that every gateway
// replica runs the watch.
func (s *SecretKeys) NeedLeaderElection() bool { return false }

// HasSynced reports whether the first listing is in.
func (s *SecretKeys) HasSynced() bool { return s.informer.HasSynced() }

// WaitForSync waits for the first listing; false when ctx ended first.
func (s *SecretKeys) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced)
}

func (s *SecretKeys) upsert(obj any) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	id := sec.Namespace + "/" + sec.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(id)
	raw := sec.Data[hashKey]
	if sec.Labels[LabelAPIKey] != "true" || len(raw) != sha256.Size {
		if sec.Labels[LabelAPIKey] == "true" {
			s.log.Info("API-key Secret has no token; ignoring it", "secret", id, "dataKey", TokenKey)
		}
		return
	}
	p := gateway.Principal{Tenant: sec.Namespace, KeyID: id}
	if v, ok := sec.Annotations[AnnotationRateLimit]; ok {
		l, err := gateway.ParseRateLimit(v)
		if err != nil {
			s.log.Error("Ignoring invalid rate limit of API key; the default applies", "secret", id, "err", err)
		} else {
			p.Limit = &l
		}
	}
	var h [sha256.Size]byte
	copy(h[:], raw)
	if s.byHash[h] == nil {
		s.byHash[h] = map[string]gateway.Principal{}
	}
	s.byHash[h][id] = p
	s.bySecret[id] = h
	if len(s.byHash[h]) > 1 {
		s.log.Error("The same API key token is in several Secrets; it is refused until only one holds it", "secret", id)
	}
}

func (s *SecretKeys) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(sec.Namespace + "/" + sec.Name)
}

func (s *SecretKeys) dropLocked(id string) {
	h, ok := s.bySecret[id]
	if !ok {
		return
	}
	delete(s.bySecret, id)
	delete(s.byHash[h], id)
	if len(s.byHash[h]) == 0 {
		delete(s.byHash, h)
	}
}

// errAmbiguous refuses a token held by several Secrets.
var errAmbiguous = fmt.Errorf("%w: the key is held by several Secrets", gateway.ErrUnauthorized)

// Authenticate implements gateway.Authenticator. The token is hashed first
// and looked up by its SHA-256, so lookup timing says nothing usable about
// the token; the found hash is compared in constant time.
func (s *SecretKeys) Authenticate(_ *http.Request, token string) (gateway.Principal, error) {
	if token == "" {
		return gateway.Principal{}, gateway.ErrUnauthorized
	}
	h := sha256.Sum256([]byte(token))
	s.mu.RLock()
	defer s.mu.RUnlock()
	holders := s.byHash[h]
	if len(holders) > 1 {
		return gateway.Principal{}, errAmbiguous
	}
	for id, p := range holders {
		stored := s.bySecret[id]
		if subtle.ConstantTimeCompare(stored[:], h[:]) == 1 {
			return p, nil
		}
	}
	if !s.informer.HasSynced() {
		return gateway.Principal{}, errors.New("API keys are not loaded yet")
	}
	return gateway.Principal{}, gateway.ErrUnauthorized
}
