package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/controller"
	"github.com/picobot/picobot/operator/internal/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// The suite runs against a real kube-apiserver (test/controlplane) and a real
// PostgreSQL (test/services), started once per package.
var (
	k8s        client.Client
	restConfig *rest.Config
	testScheme *runtime.Scheme
	pg         *schedulertest.Postgres
	skipReason string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	baseline := goleak.IgnoreCurrent()
	code := runSuite(m)
	if code == 0 {
		if err := goleak.Find(append(controlplane.LeakIgnores(
			goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
			goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// zapLevel keeps the logs to warnings and errors (the benchmarks would log a
// lot otherwise) unless PICOBOT_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("PICOBOT_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.WarnLevel
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
	pg, err = schedulertest.StartPostgres()
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipReason = reason
		return m.Run()
	}
	defer pg.Stop()
	restConfig = env.Config
	testScheme = runtime.NewScheme()
	must(clientgoscheme.AddToScheme(testScheme))
	must(picobotv1alpha1.AddToScheme(testScheme))
	k8s, err = client.New(restConfig, client.Options{Scheme: testScheme})
	must(err)
	return m.Run()
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func need(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
}

var nsSeq atomic.Int64

// newNamespace creates a fresh namespace so tests do not see each other.
func newNamespace(tb testing.TB) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sched-%d-%d", os.Getpid()%1000, nsSeq.Add(1))}}
	must(k8s.Create(context.Background(), ns))
	return ns.Name
}

// managerOptions are a test manager's: its cache sees only ns (other tests'
// CronJobs stay out), metrics and probes are off, and with leaderID set it
// takes part in a fast leader election in ns.
func managerOptions(ns, leaderID string) ctrl.Options {
	opts := ctrl.Options{
		Scheme:                 testScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}
	if leaderID != "" {
		lease, renew, retry := 3*time.Second, 2*time.Second, 250*time.Millisecond
		opts.LeaderElection = true
		opts.LeaderElectionID = leaderID
		opts.LeaderElectionNamespace = ns
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &lease, &renew, &retry
	}
	return opts
}

// started is a running manager.
type started struct {
	manager.Manager
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// stop cancels the manager and waits for it; without releasing its Lease
// it is what a crash looks like to the other replicas.
func (s *started) stop() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
	})
}

func startManager(tb testing.TB, mgr manager.Manager) *started {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{Manager: mgr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	tb.Cleanup(s.stop)
	NewWithT(tb).Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())
	return s
}

// operator starts a manager for ns running the scheduler Runnable with cfg
// and, when controllers is set, the operator's reconcilers on that clock —
// the operator as it ships. With leaderID set it takes part in a leader
// election.
func operator(tb testing.TB, ns, leaderID string, cfg scheduler.Config, controllers clock.PassiveClock) (*started, *scheduler.Runnable) {
	tb.Helper()
	mgr, err := ctrl.NewManager(restConfig, managerOptions(ns, leaderID))
	if err != nil {
		tb.Fatal(err)
	}
	if controllers != nil {
		err := controller.Setup(context.Background(), mgr, controller.Config{Catalog: policy.DefaultCatalog(), Concurrency: 4, Clock: controllers})
		if err != nil {
			tb.Fatal(err)
		}
	}
	r, err := scheduler.Add(mgr, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return startManager(tb, mgr), r
}

// scheduled is how many jobs r's scheduler knows (0 before it starts).
func scheduled(r *scheduler.Runnable) int {
	if s := r.Scheduler(); s != nil {
		return s.Len()
	}
	return 0
}
