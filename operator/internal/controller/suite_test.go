package controller

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/test/controlplane"
)

var (
	k8s        client.Client // direct client (no cache) for test actions
	restConfig *rest.Config
	testScheme *runtime.Scheme
	skipReason string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	// Goroutines alive before the suite are not ours to judge.
	baseline := goleak.IgnoreCurrent()
	code := runSuite(m)
	if code == 0 {
		if err := goleak.Find(append(leakIgnores(), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) int {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipReason = reason
		return m.Run()
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}()
	restConfig = env.Config
	testScheme = runtime.NewScheme()
	must(clientgoscheme.AddToScheme(testScheme))
	must(picobotv1alpha1.AddToScheme(testScheme))
	k8s, err = client.New(restConfig, client.Options{Scheme: testScheme})
	must(err)

	ctx, cancel := context.WithCancel(context.Background())
	mgr, _ := newTestManager(ctx, nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	})
	code := m.Run()
	cancel()
	wg.Wait()
	return code
}

// leakIgnores lists goroutines of client-go and klog that outlive a manager by
// design (process-wide workers), not leaks of ours.
func leakIgnores() []goleak.Option {
	return controlplane.LeakIgnores(
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
}

// writeCounter counts the writes a manager's client sends to the API server,
// and the distinct PicoBot objects it read (each reconcile starts with a read).
type writeCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	reads map[string]struct{}
}

func (w *writeCounter) read(obj client.Object) {
	switch obj.(type) {
	case *picobotv1alpha1.Agent, *picobotv1alpha1.CronJob, *picobotv1alpha1.BrowserProfile:
	default:
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reads == nil {
		w.reads = map[string]struct{}{}
	}
	w.reads[fmt.Sprintf("%T/%s", obj, obj.GetName())] = struct{}{}
}

func (w *writeCounter) readCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.reads)
}

// newTestManager builds a manager running exactly the reconcilers main runs.
// With wc set, every write through the manager's client is counted and the
// cache is restricted to namespaces (when given).
func newTestManager(ctx context.Context, wc *writeCounter, namespaces ...string) (ctrl.Manager, error) {
	opts := ctrl.Options{
		Scheme:  testScheme,
		Cache:   CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Each test manager is its own controller set; names must not collide
		// in the process-wide metrics registry.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	}
	if len(namespaces) == 0 {
		// The namespaces of runtime tests belong to their own managers.
		var not []fields.Selector
		for _, ns := range runtimeNamespaces() {
			not = append(not, fields.OneTermNotEqualSelector("metadata.namespace", ns))
		}
		opts.Cache.DefaultNamespaces = map[string]cache.Config{cache.AllNamespaces: {FieldSelector: fields.AndSelectors(not...)}}
	} else {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	if wc != nil {
		opts.NewClient = countingNewClient(wc)
	}
	mgr, err := ctrl.NewManager(restConfig, opts)
	must(err)
	must(Setup(ctx, mgr, Config{Catalog: policy.DefaultCatalog(), Concurrency: 4}))
	return mgr, nil
}

// countingNewClient makes a manager's client count the writes it sends and
// record the PicoBot objects it reads, in wc.
func countingNewClient(wc *writeCounter) func(*rest.Config, client.Options) (client.Client, error) {
	return func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, o)
		if err != nil {
			return nil, err
		}
		count := func() { wc.n.Add(1) }
		return interceptor.NewClient(c, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, o ...client.GetOption) error {
				err := c.Get(ctx, key, obj, o...)
				if err == nil {
					wc.read(obj)
				}
				return err
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.CreateOption) error {
				count()
				return c.Create(ctx, obj, o...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.UpdateOption) error {
				count()
				return c.Update(ctx, obj, o...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, o ...client.PatchOption) error {
				count()
				return c.Patch(ctx, obj, p, o...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.DeleteOption) error {
				count()
				return c.Delete(ctx, obj, o...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, o ...client.SubResourceUpdateOption) error {
				count()
				return c.SubResource(sub).Update(ctx, obj, o...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
				count()
				return c.SubResource(sub).Patch(ctx, obj, p, o...)
			},
		}), nil
	}
}

func ptr[T any](v T) *T { return &v }

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func needAPIServer(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

var nsSeq atomic.Int64

// newNamespace creates a fresh namespace so tests do not see each other.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t%d-%d", os.Getpid()%1000, nsSeq.Add(1))}}
	must(k8s.Create(context.Background(), ns))
	return ns.Name
}
