// Package published is the format of what the operator publishes for the
// gateway in the gateway's own namespace, so that the gateway reads no
// Secret of a tenant namespace:
//
//   - per tenant namespace, one ConfigMap indexing its API keys: for each
//     Secret labelled gateway.picobot.io/api-key: "true", the SHA-256 of its
//     token and its rate-limit annotation (never the token);
//   - per channel Secret an Agent names, a copy of that Secret (the gateway
//     calls the chat platform with those credentials, so it needs them).
//
// The operator writes both (operator/internal/controller), the gateway
// watches them (runtime/gateway/kubeauth, runtime/cmd/picobot). Only the
// operator and the platform's administrators write in that namespace, so the
// tenant named by an object there is trusted.
package published

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names tenants use on their API-key Secrets.
const (
	// LabelAPIKey marks a Secret as a gateway API key (value "true").
	LabelAPIKey = "gateway.picobot.io/api-key"
	// AnnotationRateLimit overrides the gateway's default rate limit for the
	// key: "<requests>/<s|m|h>[,burst=<n>]" (e.g. "600/m,burst=20") or
	// "unlimited". An invalid value is logged and the default applies.
	AnnotationRateLimit = "gateway.picobot.io/rate-limit"
	// TokenKey is the data key holding the token.
	TokenKey = "key"
	// HashDataKey is where a cache transform keeps the hex SHA-256 of a
	// Secret's token in place of the token. The ':' is not allowed in
	// Secret data keys, so a Secret from the API server never has it.
	HashDataKey = "sha256:" + TokenKey
)

// Names on the published objects.
const (
	// LabelKeyIndex marks a tenant's API-key index ConfigMap ("true").
	LabelKeyIndex = "gateway.picobot.io/api-key-index"
	// LabelChannelCredentials marks a copy of a channel Secret ("true").
	LabelChannelCredentials = "gateway.picobot.io/channel-credentials"
	// LabelTenant names the tenant namespace a published object is of
	// (namespace names fit a label value).
	LabelTenant = "gateway.picobot.io/tenant"
	// AnnotationSecret names the tenant's Secret a channel copy is of.
	AnnotationSecret = "gateway.picobot.io/secret"
)

// KeyIndexName is the name of tenant's API-key index ConfigMap.
func KeyIndexName(tenant string) string { return "picobot-api-keys-" + tenant }

// ChannelCredentialsName is the name of the copy of tenant's channel Secret
// secret. It is hashed: a namespace and a Secret name together can be longer
// than an object name.
func ChannelCredentialsName(tenant, secret string) string {
	h := sha256.Sum256([]byte(tenant + "/" + secret))
	return "picobot-channel-" + hex.EncodeToString(h[:12])
}

// Key is what the index keeps of one API-key Secret.
type Key struct {
	// SHA256 is the hex SHA-256 of the token.
	SHA256 string `json:"sha256"`
	// RateLimit is the Secret's rate-limit annotation, as written.
	RateLimit *string `json:"rateLimit,omitempty"`
}

// HashToken returns the hex SHA-256 of a token, as Key.SHA256 holds it.
func HashToken(token []byte) string {
	h := sha256.Sum256(token)
	return hex.EncodeToString(h[:])
}

// KeyIndex returns the index ConfigMap of tenant's keys (by Secret name), to
// be written in namespace ns.
func KeyIndex(ns, tenant string, keys map[string]Key) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: KeyIndexName(tenant), Namespace: ns, Labels: KeyIndexLabels(tenant)},
		Data:       make(map[string]string, len(keys)),
	}
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		b, err := json.Marshal(keys[name])
		if err != nil {
			return nil, fmt.Errorf("failed to encode API key %s/%s: %w", tenant, name, err)
		}
		cm.Data[name] = string(b) // Secret names are valid ConfigMap keys
	}
	return cm, nil
}

// KeyIndexLabels are the labels of tenant's index ConfigMap.
func KeyIndexLabels(tenant string) map[string]string {
	return map[string]string{LabelKeyIndex: "true", LabelTenant: tenant}
}

// ParseKeyIndex reads an index ConfigMap: its tenant and keys by Secret
// name. An entry that does not decode is returned in bad and left out.
func ParseKeyIndex(cm *corev1.ConfigMap) (tenant string, keys map[string]Key, bad error) {
	tenant = cm.Labels[LabelTenant]
	if tenant == "" || cm.Name != KeyIndexName(tenant) {
		return "", nil, fmt.Errorf("ConfigMap %s/%s is not the API-key index of a tenant (label %s)", cm.Namespace, cm.Name, LabelTenant)
	}
	keys = make(map[string]Key, len(cm.Data))
	var errs []error
	for name, v := range cm.Data {
		var k Key
		if err := json.Unmarshal([]byte(v), &k); err != nil {
			errs = append(errs, fmt.Errorf("failed to decode API key %s/%s: %w", tenant, name, err))
			continue
		}
		if raw, err := hex.DecodeString(k.SHA256); err != nil || len(raw) != sha256.Size {
			errs = append(errs, fmt.Errorf("API key %s/%s: sha256 is not a hex SHA-256", tenant, name))
			continue
		}
		keys[name] = k
	}
	if len(errs) > 0 {
		return tenant, keys, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, errors.Join(errs...))
	}
	return tenant, keys, nil
}

// ChannelCredentials returns the copy of tenant's channel Secret src, to be
// written in namespace ns.
func ChannelCredentials(ns, tenant string, src *corev1.Secret) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ChannelCredentialsName(tenant, src.Name), Namespace: ns,
			Labels:      ChannelCredentialsLabels(tenant),
			Annotations: map[string]string{AnnotationSecret: src.Name}},
		Type: corev1.SecretTypeOpaque,
		Data: maps.Clone(src.Data),
	}
}

// ChannelCredentialsLabels are the labels of tenant's channel Secret copies.
func ChannelCredentialsLabels(tenant string) map[string]string {
	return map[string]string{LabelChannelCredentials: "true", LabelTenant: tenant}
}

// IsChannelCredentials reports whether s is the copy of tenant's Secret
// secret (and not another object that happens to have its name).
func IsChannelCredentials(s *corev1.Secret, tenant, secret string) bool {
	return s.Labels[LabelChannelCredentials] == "true" && s.Labels[LabelTenant] == tenant &&
		s.Annotations[AnnotationSecret] == secret && s.Name == ChannelCredentialsName(tenant, secret)
}
