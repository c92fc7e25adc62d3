// Package kubeauth authenticates gateway clients with API keys kept as
// Kubernetes Secrets (cluster mode): a Secret labelled
// gateway.picobot.io/api-key: "true" in a tenant's namespace holds a token
// under the key "key", and a request bearing that token acts for that
// namespace.
//
// The gateway reads no tenant's Secret: the operator publishes, per tenant
// namespace, an index ConfigMap of the SHA-256 of each key's token (and its
// rate-limit annotation) in the gateway's own namespace (package published),
// and the authenticator watches those ConfigMaps. Creating, rotating
// (changing "key") or deleting a Secret takes effect as soon as the operator
// has republished the index and the watch delivers it.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
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

	"github.com/picobot/picobot/runtime/cluster/published"
	"github.com/picobot/picobot/runtime/gateway"
)

// Names of the API, kept here for the gateway's callers.
const (
	LabelAPIKey         = published.LabelAPIKey
	AnnotationRateLimit = published.AnnotationRateLimit
	TokenKey            = published.TokenKey
)

// SecretKeys is a gateway.Authenticator over the published API-key indexes.
// Start it (it is a controller-runtime manager.Runnable) and wait for
// HasSynced before serving.
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
	byTenant map[string][]string          // tenant -> its namespace/name keys
}

// New returns an authenticator watching the API-key indexes the operator
// publishes in namespace (the gateway's own; its service account needs list
// and watch on ConfigMaps there, and nothing on Secrets).
func New(cs kubernetes.Interface, namespace string, log *slog.Logger) (*SecretKeys, error) {
	if namespace == "" {
		return nil, errors.New("the API-key index namespace is empty: give the gateway's namespace")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &SecretKeys{log: log, byHash: map[[sha256.Size]byte]map[string]gateway.Principal{},
		bySecret: map[string][sha256.Size]byte{}, byTenant: map[string][]string{}}
	s.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = published.LabelKeyIndex + "=true" }))
	s.informer = s.factory.Core().V1().ConfigMaps().Informer()
	_, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.upsert(obj) },
		UpdateFunc: func(_, obj any) { s.upsert(obj) },
		DeleteFunc: s.remove,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to watch API-key indexes: %w", err)
	}
	return s, nil
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

// upsert replaces every key of the index's tenant by those it lists.
func (s *SecretKeys) upsert(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	tenant, keys, err := published.ParseKeyIndex(cm)
	if err != nil {
		s.log.Error("Ignoring invalid entries of an API-key index", "configMap", cm.Name, "err", err)
	}
	if tenant == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropTenantLocked(tenant)
	for name, k := range keys {
		s.addLocked(tenant, name, k)
	}
}

func (s *SecretKeys) addLocked(tenant, name string, k published.Key) {
	id := tenant + "/" + name
	p := gateway.Principal{Tenant: tenant, KeyID: id}
	if k.RateLimit != nil {
		l, err := gateway.ParseRateLimit(*k.RateLimit)
		if err != nil {
			s.log.Error("Ignoring invalid rate limit of API key; the default applies", "secret", id, "err", err)
		} else {
			p.Limit = &l
		}
	}
	var h [sha256.Size]byte
	_, _ = hex.Decode(h[:], []byte(k.SHA256)) // ParseKeyIndex checked it
	if s.byHash[h] == nil {
		s.byHash[h] = map[string]gateway.Principal{}
	}
	s.byHash[h][id] = p
	s.bySecret[id] = h
	s.byTenant[tenant] = append(s.byTenant[tenant], id)
	if len(s.byHash[h]) > 1 {
		s.log.Error("The same API key token is in several Secrets; it is refused until only one holds it", "secret", id)
	}
}

func (s *SecretKeys) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	tenant := cm.Labels[published.LabelTenant]
	if tenant == "" || cm.Name != published.KeyIndexName(tenant) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropTenantLocked(tenant)
}

func (s *SecretKeys) dropTenantLocked(tenant string) {
	for _, id := range s.byTenant[tenant] {
		h := s.bySecret[id]
		delete(s.bySecret, id)
		delete(s.byHash[h], id)
		if len(s.byHash[h]) == 0 {
			delete(s.byHash, h)
		}
	}
	delete(s.byTenant, tenant)
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
