package bottask_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// Cluster mode is tested on the real kube-apiserver + etcd and on
// PostgreSQL as the unprivileged application role, as a session pod runs;
// each starts once per package. Without them those tests skip, loudly (and
// fail under CI).
var (
	kube       client.Client
	pg         *schedulertest.Postgres
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	baseline := goleak.IgnoreCurrent()
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), picobotv1alpha1.AddToScheme(scheme)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipReason = reason
	} else if kube, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		skipReason = fmt.Sprintf("failed to connect to the control plane: %v", err)
	}
	if skipReason == "" {
		if pg, err = schedulertest.StartPostgres(); err != nil {
			reason, fatal := services.Unavailable("PostgreSQL", err)
			if fatal {
				fmt.Fprintln(os.Stderr, reason)
				_ = env.Stop()
				return 1
			}
			skipReason = reason
			pg = nil
		}
	}
	code := m.Run()
	if pg != nil {
		pg.Stop()
	}
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(baseline, goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
