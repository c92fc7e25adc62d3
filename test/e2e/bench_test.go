package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// apiserverWrites sums the API server's own count of write requests to PicoBot
// resources (every verb that changes state, status subresource included).
func apiserverWrites(ctx context.Context) (float64, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return 0, err
	}
	get := func(ctx context.Context) ([]byte, error) {
		return cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	}
	var total float64
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE", "APPLY"} {
		n, err := metric(ctx, get, "apiserver_request_total", `group="agents.picobot.io"`, `verb="`+verb+`"`)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// BenchmarkAgents1000Ready creates 1,000 Agents at once and measures the time
// until the operator reports all of them Ready, and the operator's RSS. Then it
// restarts the operator, which reconciles every Agent again, and counts the
// writes the API server received meanwhile (target: zero).
func BenchmarkAgents1000Ready(b *testing.B) {
	needAPIServer(b)
	const n = 1000
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		ns := fmt.Sprintf("bench-%d-%d", time.Now().Unix(), i)
		must(b, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		must(b, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys"},
			Data: map[string][]byte{"openai": []byte("sk")}}))

		writesAtStart, err := apiserverWrites(ctx)
		must(b, err)
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 32)
		for j := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				errs <- k8s.Create(ctx, benchAgent(ns, j))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(b, err)
		}
		created := time.Since(start)
		for ready := 0; ready < n; {
			l := &picobotv1alpha1.AgentList{}
			must(b, k8s.List(ctx, l, client.InNamespace(ns)))
			ready = 0
			for _, a := range l.Items {
				if meta.IsStatusConditionTrue(a.Status.Conditions, picobotv1alpha1.ConditionReady) {
					ready++
				}
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("only %d of %d Agents Ready after 5 minutes", ready, n)
			}
			if ready < n {
				time.Sleep(100 * time.Millisecond)
			}
		}
		allReady := time.Since(start)
		cur, peak, err := operator.rssKB()
		must(b, err)
		// The counter must see this phase's writes (1,000 creates + 1,000 status
		// patches), or a zero below would prove nothing.
		writesReady, err := apiserverWrites(ctx)
		must(b, err)
		if writesReady-writesAtStart < 2*n {
			b.Fatalf("API server counted %v writes for %d creates + status patches; the write counter is broken", writesReady-writesAtStart, n)
		}
		must(b, err)

		// Resync: a fresh operator process lists and reconciles every Agent.
		all := &picobotv1alpha1.AgentList{}
		must(b, k8s.List(ctx, all))
		before, err := apiserverWrites(ctx)
		must(b, err)
		operator.stop()
		restart := time.Now()
		operator, err = startOperator(workDir)
		must(b, err)
		for {
			done, err := metric(ctx, operator.metrics, "controller_runtime_reconcile_total", `controller="agent"`)
			must(b, err)
			if int(done) >= len(all.Items) {
				break
			}
			if time.Since(restart) > 5*time.Minute {
				b.Fatalf("restarted operator reconciled %v of %d Agents in 5 minutes", done, len(all.Items))
			}
			time.Sleep(100 * time.Millisecond)
		}
		resynced := time.Since(restart)
		time.Sleep(2 * time.Second) // let any straggling write land before counting
		after, err := apiserverWrites(ctx)
		must(b, err)

		b.ReportMetric(created.Seconds(), "s-create")
		b.ReportMetric(allReady.Seconds(), "s-all-ready")
		b.ReportMetric(float64(peak)/1024, "MB-rss-peak")
		b.ReportMetric(float64(cur)/1024, "MB-rss")
		b.ReportMetric(resynced.Seconds(), "s-resync")
		b.ReportMetric(writesReady-writesAtStart, "writes-to-ready")
		b.ReportMetric(after-before, "writes-on-resync")
		b.ReportMetric(float64(len(all.Items)), "agents-resynced")
	}
}

func benchAgent(ns string, i int) *picobotv1alpha1.Agent {
	a := &picobotv1alpha1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("agent-%04d", i)},
		Spec: picobotv1alpha1.AgentSpec{
			Instructions: "You are agent number " + fmt.Sprint(i),
			Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{
				Provider: "openai", Model: "gpt-5.2",
				APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "keys"}, Key: "openai"},
			}},
			Tools: &picobotv1alpha1.ToolsSpec{ToolPolicy: picobotv1alpha1.ToolPolicy{Profile: "coding", Allow: []string{"group:web"}, Deny: []string{"pty"}}},
		},
	}
	if i > 0 && i%10 == 0 {
		a.Spec.Delegates = []picobotv1alpha1.Delegate{{Name: "helper", AgentRef: corev1.LocalObjectReference{Name: fmt.Sprintf("agent-%04d", i-1)}}}
	}
	return a
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
