package bottask_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	env, k, reason, err := controlplane.Connect()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kube, skipReason = k, reason
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
		if err := goleak.Find(append(controlplane.LeakIgnores(), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
