package skill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var sharedSelector = labels.SelectorFromSet(labels.Set{SharedLabel: "true"})

// clientConfigMaps reads ConfigMaps through a client at every call. It serves
// a client that cannot watch; with the cached client of a controller-runtime
// manager the reads come from its informers.
type clientConfigMaps struct {
	c         client.Reader
	namespace string
}

func (k *clientConfigMaps) get(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := k.c.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return cm, nil
}

func (k *clientConfigMaps) shared(ctx context.Context) ([]*corev1.ConfigMap, error) {
	list := &corev1.ConfigMapList{}
	if err := k.c.List(ctx, list, client.InNamespace(k.namespace), client.MatchingLabelsSelector{Selector: sharedSelector}); err != nil {
		return nil, err
	}
	out := make([]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func (k *clientConfigMaps) where() string { return "namespace " + k.namespace }

// watchedConfigMaps keeps the skill ConfigMaps of a namespace in informer
// caches: one for the ConfigMaps labelled SharedLabel=true, one per ConfigMap
// an Agent references by name (a field selector, so the runtime needs no
// right to read the namespace's other ConfigMaps). A turn reads the caches,
// so it sees a change as soon as the watch delivered it.
type watchedConfigMaps struct {
	namespace string
	sharedInf toolscache.SharedIndexInformer
	named     map[string]toolscache.SharedIndexInformer
	log       *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	lastErr map[string]error // informer -> its latest list/watch error
}

// startWatch starts the informers and waits up to timeout for their first
// list. A watch that has not synced by then is reported by problems and keeps
// retrying; skills it serves appear once it syncs.
func startWatch(ctx context.Context, c client.WithWatch, namespace string, names []string, timeout time.Duration, log *slog.Logger) *watchedConfigMaps {
	w := &watchedConfigMaps{namespace: namespace, named: map[string]toolscache.SharedIndexInformer{}, log: log, lastErr: map[string]error{}}
	w.sharedInf = w.informer(c, "shared", func(o *client.ListOptions) { o.LabelSelector = sharedSelector })
	for _, name := range names {
		if _, dup := w.named[name]; !dup {
			w.named[name] = w.informer(c, "ConfigMap "+name, func(o *client.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name)
			})
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	all := w.informers()
	for _, inf := range all {
		w.wg.Go(func() { inf.RunWithContext(runCtx) })
	}
	syncCtx, stop := context.WithTimeout(ctx, timeout)
	defer stop()
	synced := make([]toolscache.InformerSynced, len(all))
	for i, inf := range all {
		synced[i] = inf.HasSynced
	}
	if !toolscache.WaitForCacheSync(syncCtx.Done(), synced...) {
		log.Warn("Skill ConfigMaps not synced yet; skills from them appear once the watch works", "namespace", namespace, "timeout", timeout)
	}
	return w
}

func (w *watchedConfigMaps) informers() []toolscache.SharedIndexInformer {
	out := []toolscache.SharedIndexInformer{w.sharedInf}
	names := make([]string, 0, len(w.named))
	for n := range w.named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, w.named[n])
	}
	return out
}

// informer builds an informer over the namespace's ConfigMaps that select
// narrows down; its list and watch go through c.
func (w *watchedConfigMaps) informer(c client.WithWatch, what string, selectOpt func(*client.ListOptions)) toolscache.SharedIndexInformer {
	opts := func(raw *metav1.ListOptions) *client.ListOptions {
		o := &client.ListOptions{Namespace: w.namespace, Raw: raw, Limit: raw.Limit, Continue: raw.Continue}
		selectOpt(o)
		return o
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, raw metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.ConfigMapList{}
			err := c.List(ctx, list, opts(&raw))
			w.recordErr(what, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, raw metav1.ListOptions) (watch.Interface, error) {
			wi, err := c.Watch(ctx, &corev1.ConfigMapList{}, opts(&raw))
			w.recordErr(what, err)
			return wi, err
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &corev1.ConfigMap{}, toolscache.SharedIndexInformerOptions{})
	_ = inf.SetTransform(stripManagedFields)
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *toolscache.Reflector, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		w.recordErr(what, err)
		w.log.Debug("Skill ConfigMap watch interrupted", "namespace", w.namespace, "watch", what, "error", err)
	})
	return inf
}

// stripManagedFields drops what skills never read from cached objects.
func stripManagedFields(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.ManagedFields = nil
		cm.BinaryData = nil
	}
	return obj, nil
}

func (w *watchedConfigMaps) recordErr(what string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		delete(w.lastErr, what)
	} else {
		w.lastErr[what] = err
	}
}

func (w *watchedConfigMaps) get(_ context.Context, name string) (*corev1.ConfigMap, error) {
	inf := w.named[name]
	if inf == nil {
		return nil, fmt.Errorf("ConfigMap %s is not watched (only those the Agent names when the session starts)", name)
	}
	if err := w.notSynced(inf, "ConfigMap "+name); err != nil {
		return nil, err
	}
	obj, ok, err := inf.GetStore().GetByKey(w.namespace + "/" + name)
	if err != nil || !ok {
		return nil, err
	}
	cm, _ := obj.(*corev1.ConfigMap)
	return cm, nil
}

func (w *watchedConfigMaps) shared(context.Context) ([]*corev1.ConfigMap, error) {
	if err := w.notSynced(w.sharedInf, "shared"); err != nil {
		return nil, err
	}
	var out []*corev1.ConfigMap
	for _, obj := range w.sharedInf.GetStore().List() {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			out = append(out, cm)
		}
	}
	return out, nil
}

// notSynced explains an informer that has not completed its first list.
func (w *watchedConfigMaps) notSynced(inf toolscache.SharedIndexInformer, what string) error {
	if inf.HasSynced() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.lastErr[what]; err != nil {
		return fmt.Errorf("the watch has not started: %w", err)
	}
	return errors.New("the watch has not started yet")
}

func (w *watchedConfigMaps) where() string { return "namespace " + w.namespace }

// close stops the informers and waits for them.
func (w *watchedConfigMaps) close() {
	w.cancel()
	w.wg.Wait()
}
