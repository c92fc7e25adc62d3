package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/test/services"
)

// maxRuntimeNamespaces is how many namespaces runtime tests may create; the
// suite's status-only manager does not watch them (its Ready would not
// count RuntimeReady and would fight the runtime manager's).
const maxRuntimeNamespaces = 32

var runtimeNSSeq atomic.Int64

// runtimeNamespaces are the names runtime tests' namespaces take.
func runtimeNamespaces() []string {
	out := make([]string, maxRuntimeNamespaces)
	for i := range out {
		out[i] = fmt.Sprintf("rt-%d", i+1)
	}
	return out
}

// newRuntimeNamespace creates the next of runtimeNamespaces.
func newRuntimeNamespace(t *testing.T) string {
	t.Helper()
	i := runtimeNSSeq.Add(1)
	if i > maxRuntimeNamespaces {
		t.Fatalf("more than %d runtime namespaces: raise maxRuntimeNamespaces", maxRuntimeNamespaces)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rt-%d", i)}}
	must(k8s.Create(context.Background(), ns))
	return ns.Name
}

// startRuntimeManager runs, until the test ends, a manager with session pods
// on (a throwaway Redis; no kubelet, so pods stay Pending) watching only ns,
// with exactly the reconcilers main runs. edit adjusts its RuntimeConfig.
func startRuntimeManager(t *testing.T, ns string, edit func(*RuntimeConfig)) *RuntimeConfig {
	t.Helper()
	return startRuntimeManagerIn(t, []string{ns}, edit)
}

// startRuntimeManagerIn is startRuntimeManager watching several namespaces.
func startRuntimeManagerIn(t *testing.T, namespaces []string, edit func(*RuntimeConfig)) *RuntimeConfig {
	t.Helper()
	return startRuntimeManagerWith(t, namespaces, edit, QuotaDefaults{})
}

// startRuntimeManagerWith is startRuntimeManagerIn with default tenant caps.
func startRuntimeManagerWith(t *testing.T, namespaces []string, edit func(*RuntimeConfig), quota QuotaDefaults) *RuntimeConfig {
	t.Helper()
	needAPIServer(t)
	url := services.RedisFor(t)
	b, err := redisbus.Open(url, redisbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := ctrl.Options{Scheme: testScheme, Cache: CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)}}
	opts.Cache.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range namespaces {
		opts.Cache.DefaultNamespaces[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(restConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	rc := &RuntimeConfig{Image: "registry.example/picobot:test", Redis: b.Client(), Bus: b,
		Connection: map[string]string{"PICOBOT_REDIS_URL": url}, APIReader: mgr.GetAPIReader(), ResyncBusy: time.Second}
	if edit != nil {
		edit(rc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := Setup(ctx, mgr, Config{Catalog: policy.DefaultCatalog(), Concurrency: 4, Runtime: rc, Quota: quota}); err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("runtime manager stopped: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = b.Close()
	})
	return rc
}
