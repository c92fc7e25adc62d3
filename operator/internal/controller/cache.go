package controller

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/cluster/published"
)

const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// StripSecretValues keeps a Secret's key names and drops its values before the
// object enters the informer cache. The operator only checks that referenced keys
// exist and are no placeholders (whose values it keeps); holding no secret values keeps them out of its memory, heap dumps and
// logs, and keeps the cache small in clusters with many large Secrets. Of a
// gateway API-key Secret it keeps the SHA-256 of the token (under
// published.HashDataKey), which it publishes for the gateway.
func StripSecretValues(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	hash := apiKeyHash(s)
	// A placeholder where a key goes is no secret: it stays, so the Agent
	// can say its key is one (agentspec.IsPlaceholderKey).
	for k, v := range s.Data {
		if !agentspec.IsPlaceholderKey(string(v)) {
			s.Data[k] = []byte{}
		}
	}
	for k, v := range s.StringData {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		if agentspec.IsPlaceholderKey(v) {
			s.Data[k] = []byte(v)
		} else {
			s.Data[k] = []byte{}
		}
	}
	s.StringData = nil
	if hash != "" {
		s.Data[published.HashDataKey] = []byte(hash)
	}
	stripCommon(s)
	return s, nil
}

// apiKeyHash returns the hex SHA-256 of an API-key Secret's token, or ""
// for another Secret or one without a token. A Secret the transform already
// saw (transforms may run more than once) keeps its hash.
func apiKeyHash(s *corev1.Secret) string {
	if s.Labels[published.LabelAPIKey] != "true" {
		return ""
	}
	if tok := s.Data[published.TokenKey]; len(tok) > 0 {
		return published.HashToken(tok)
	}
	return string(s.Data[published.HashDataKey])
}

// StripConfigMapValues keeps the data of PicoBot's own ConfigMaps (the namespace
// defaults, the API-key indexes it publishes) and only key names of every other
// ConfigMap: the operator needs their existence, not their content, and
// clusters hold many large ConfigMaps.
func StripConfigMapValues(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	// A sandbox pod's address ConfigMap is the operator's own too.
	own := cm.Labels[podspec.LabelComponent] == podspec.ComponentSandbox && cm.Labels[podspec.LabelManagedBy] == "picobot-operator"
	if cm.Name != picobotv1alpha1.NamespaceDefaultsConfigMap && cm.Labels[published.LabelKeyIndex] != "true" && !own {
		for k := range cm.Data {
			cm.Data[k] = ""
		}
		for k := range cm.BinaryData {
			cm.BinaryData[k] = []byte{}
		}
	}
	stripCommon(cm)
	return cm, nil
}

// stripCommon drops managed fields and the last-applied annotation, which for a
// Secret applied with kubectl contains its values in clear.
func stripCommon(o client.Object) {
	o.SetManagedFields(nil)
	if a := o.GetAnnotations(); a != nil {
		delete(a, lastAppliedAnnotation)
	}
}

// CacheOptions returns the informer cache settings of the operator.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:    {Transform: toolscache.TransformFunc(StripSecretValues)},
			&corev1.ConfigMap{}: {Transform: toolscache.TransformFunc(StripConfigMapValues)},
			// Only session and browser pods: clusters run many pods the
			// operator has nothing to do with.
			&corev1.Pod{}: {Label: picobotSelector(podspec.ComponentSession, podspec.ComponentBrowser, podspec.ComponentSandbox)},
			// Only the Leases sessions ask for browsers with (not the
			// node heartbeats and leader elections of the cluster).
			&coordinationv1.Lease{}: {Label: picobotSelector(podspec.ComponentBrowser)},
			// Only the operator's own identity and network objects, which it
			// watches to set them back.
			&corev1.ServiceAccount{}:      {Label: managedSelector()},
			&rbacv1.Role{}:                {Label: managedSelector()},
			&rbacv1.RoleBinding{}:         {Label: managedSelector()},
			&networkingv1.NetworkPolicy{}: {Label: managedSelector()},
		},
	}
}

// WatchGatewayNamespace adds the gateway's namespace to the Secret and
// ConfigMap informers of a namespaced operator (watching namespaces), which
// watch the objects published there for the gateway.
func WatchGatewayNamespace(opts *cache.Options, namespaces []string, gatewayNS string) {
	for obj, by := range opts.ByObject {
		switch obj.(type) {
		case *corev1.Secret, *corev1.ConfigMap:
			by.Namespaces = map[string]cache.Config{gatewayNS: {}}
			for _, ns := range namespaces {
				by.Namespaces[ns] = cache.Config{}
			}
			opts.ByObject[obj] = by
		}
	}
}

// managedSelector selects the objects the operator writes.
func managedSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{podspec.LabelManagedBy: "picobot-operator"})
}

// picobotSelector selects PicoBot objects of the given components.
func picobotSelector(components ...string) labels.Selector {
	name, _ := labels.NewRequirement(podspec.LabelName, selection.Equals, []string{"picobot"})
	comp, _ := labels.NewRequirement(podspec.LabelComponent, selection.In, components)
	return labels.NewSelector().Add(*name, *comp)
}
