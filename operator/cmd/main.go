// Command operator is PicoBot's control plane: it reconciles Agent, CronJob and
// BrowserProfile resources.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/busbacklog"
	"github.com/picobot/picobot/operator/internal/controller"
	"github.com/picobot/picobot/operator/internal/deadletter"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/runtime/tool/policy"
)

type options struct {
	metrics          metricsOptions
	probeAddr        string
	leaderElect      bool
	leaderElectionNS string
	qps              float64
	burst            int
	concurrency      int
	watchNamespaces  string
	gatewayNS        string
	zapOpts          zap.Options
	runtime          runtimeOptions
	scheduler        schedulerOptions
	quota            quotaOptions
}

func main() {
	var o options
	o.metrics.bindFlags(flag.CommandLine)
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so only one replica reconciles at a time.")
	flag.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flag.Float64Var(&o.qps, "kube-api-qps", 100, "Client-side rate limit for requests to the API server.")
	flag.IntVar(&o.burst, "kube-api-burst", 200, "Burst above kube-api-qps.")
	flag.IntVar(&o.concurrency, "concurrency", 4, "Parallel reconciles per controller.")
	flag.StringVar(&o.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces to reconcile, with namespaced RBAC only (a Role per namespace); empty: every namespace (a ClusterRole).")
	flag.StringVar(&o.gatewayNS, "gateway-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the gateway, where tenants' API-key hashes and channel credentials are published for it (default $POD_NAMESPACE); empty: nothing is published.")
	o.runtime.bindFlags(flag.CommandLine)
	o.scheduler.bindFlags(flag.CommandLine)
	o.quota.bindFlags(flag.CommandLine)
	o.zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zapOpts)))

	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "Operator failed")
		os.Exit(1)
	}
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("failed to add client-go types to scheme: %w", err)
	}
	if err := picobotv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("failed to add picobot types to scheme: %w", err)
	}
	return s, nil
}

func run(ctx context.Context, o options) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cacheOpts := controller.CacheOptions()
	if namespaces := splitList(o.watchNamespaces); len(namespaces) > 0 {
		// Namespaced mode: informers per namespace, so the operator needs no
		// cluster-wide list or watch right.
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
		if o.gatewayNS != "" {
			controller.WatchGatewayNamespace(&cacheOpts, namespaces, o.gatewayNS)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 o.metrics.serverOptions(),
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "operator.agents.picobot.io",
		LeaderElectionNamespace: o.leaderElectionNS,
		// The new leader starts at once when the old one exits cleanly.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	rc, closeRuntime, err := o.runtime.config(ctx, mgr)
	if err != nil {
		return err
	}
	defer closeRuntime()
	om, err := opmetrics.New(metrics.Registry)
	if err != nil {
		return err
	}
	if rc != nil {
		rc.Metrics = om
	}
	st, err := o.scheduler.openStore(ctx)
	if err != nil {
		return err
	}
	var usage controller.UsageStore
	if st != nil {
		defer func() { _ = st.Close() }()
		usage = st
	}
	if err := controller.Setup(ctx, mgr, controller.Config{Catalog: policy.DefaultCatalog(), Concurrency: o.concurrency, Runtime: rc,
		GatewayNamespace: o.gatewayNS, Quota: o.quota.defaults(), Usage: usage}); err != nil {
		return err
	}
	if rc != nil && rc.Bus != nil {
		gauge, err := deadletter.New(mgr.GetClient(), rc.Bus, metrics.Registry)
		if err != nil {
			return fmt.Errorf("failed to register the dead-letter gauge: %w", err)
		}
		if err := mgr.Add(gauge); err != nil {
			return fmt.Errorf("failed to add the dead-letter gauge: %w", err)
		}
		backlog, err := busbacklog.New(mgr.GetClient(), rc.Redis, metrics.Registry)
		if err != nil {
			return err
		}
		if err := mgr.Add(backlog); err != nil {
			return fmt.Errorf("failed to add the bus backlog reader: %w", err)
		}
	}
	closeScheduler, err := o.scheduler.setup(ctx, mgr, rc, st, om)
	if err != nil {
		return err
	}
	defer closeScheduler()
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add ready check: %w", err)
	}
	ctrl.Log.Info("Starting operator", "leaderElection", o.leaderElect, "secureMetrics", o.metrics.secure, "concurrency", o.concurrency, "watchNamespaces", o.watchNamespaces)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("failed to run manager: %w", err)
	}
	return nil
}
