package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/store/postgres/pgtest"
	"github.com/picobot/picobot/test/services"
)

// BenchmarkAgents1000In100Namespaces creates 1,000 Agents, 10 in each of
// 100 namespaces, at once, with the operator running session pods (a
// throwaway Redis; no warm pools, so no pods): besides status it writes each
// namespace's connection Secret and NetworkPolicy and each Agent's
// ServiceAccount, Role and RoleBinding, and watches them all; each
// namespace's connection Secret carries a PostgreSQL role and a Redis user
// the operator provisions for it. It measures
// the time until every Agent is Ready and every namespace has its objects,
// and the operator's RSS.
func BenchmarkAgents1000In100Namespaces(b *testing.B) {
	needAPIServer(b)
	const namespaces, perNamespace = 100, 10
	url := services.RedisFor(b)
	// Per-tenant credentials, as production runs: each namespace gets a
	// PostgreSQL role and a Redis user of its own.
	db := pgtest.New(b, "picobot_bench_ns", fmt.Sprintf("pbns_app_%d", os.Getpid()), "bench")
	rolePrefix := fmt.Sprintf("pbns_%d_", os.Getpid())
	env := []string{"PICOBOT_POSTGRES_URL=" + db.App, "PICOBOT_POSTGRES_OWNER_URL=" + db.Owner,
		"PICOBOT_TENANT_CREDENTIALS_KEY=bench-derivation-key-0123456789abcdef"}
	// This benchmark's operator replaces the suite's (status only) while it
	// runs, so one process reconciles.
	operator.stop()
	bench, err := startOperatorEnv(workDir, env, "--runtime-image=registry.example/picobot:bench", "--redis-url="+url,
		"--tenant-role-prefix="+rolePrefix, "--tenant-user-prefix="+strings.ReplaceAll(rolePrefix, "_", "-"))
	must(b, err)
	defer func() {
		bench.stop()
		operator, err = startOperator(workDir)
		must(b, err)
	}()
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		prefix := fmt.Sprintf("b100-%d-%d-", time.Now().Unix(), i)
		var nss []string
		for n := range namespaces {
			ns := fmt.Sprintf("%s%03d", prefix, n)
			nss = append(nss, ns)
			must(b, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			must(b, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys"},
				Data: map[string][]byte{"openai": []byte("sk")}}))
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, namespaces*perNamespace)
		sem := make(chan struct{}, 32)
		for _, ns := range nss {
			for j := range perNamespace {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					errs <- k8s.Create(ctx, benchAgent(ns, j))
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(b, err)
		}
		created := time.Since(start)
		for {
			ready, objects := countReady(b, prefix), countPolicies(b, prefix)
			if ready == namespaces*perNamespace && objects == namespaces {
				break
			}
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("after 10 minutes %d of %d Agents Ready, %d of %d namespaces with their NetworkPolicy", ready, namespaces*perNamespace, objects, namespaces)
			}
			time.Sleep(200 * time.Millisecond)
		}
		allReady := time.Since(start)
		cur, peak, err := bench.rssKB()
		must(b, err)
		b.ReportMetric(created.Seconds(), "s-create")
		b.ReportMetric(allReady.Seconds(), "s-all-ready")
		b.ReportMetric(float64(cur)/1024, "MB-rss")
		b.ReportMetric(float64(peak)/1024, "MB-rss-peak")
	}
}

// countReady counts the Ready Agents of the namespaces starting with prefix.
func countReady(b *testing.B, prefix string) int {
	l := &picobotv1alpha1.AgentList{}
	must(b, k8s.List(context.Background(), l))
	n := 0
	for _, a := range l.Items {
		if strings.HasPrefix(a.Namespace, prefix) && meta.IsStatusConditionTrue(a.Status.Conditions, picobotv1alpha1.ConditionReady) {
			n++
		}
	}
	return n
}

// countPolicies counts the session NetworkPolicies of the namespaces
// starting with prefix.
func countPolicies(b *testing.B, prefix string) int {
	l := &networkingv1.NetworkPolicyList{}
	must(b, k8s.List(context.Background(), l))
	n := 0
	for _, p := range l.Items {
		if strings.HasPrefix(p.Namespace, prefix) && p.Name == "picobot-session-pods" {
			n++
		}
	}
	return n
}
