package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// scrapedManifest is tenantBase with Agent "helper" of the fake model
// (%[3]s) with the calculator tool, one warm pod and a long idle timeout
// (its pod is scraped after its turns).
const scrapedManifest = tenantBase + `
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: helper
  namespace: %[1]s
spec:
  instructions: You are a test agent.
  model:
    provider: openai
    model: fake-model
    baseURL: %[3]s
    apiKeySecretRef: {name: model-key, key: apiKey}
  tools:
    allow: ["calculator"]
  runtime:
    idleTimeout: 5m
    warmPool: 1
`

// metricsReaders creates, in the system namespace, a ServiceAccount bound
// to the shipped metrics-reader ClusterRole (config/rbac, what a Prometheus
// is bound to) and one bound to nothing, and returns a token of each.
func metricsReaders(t *testing.T) (reader, stranger string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "metrics_reader_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.UnmarshalStrict(data, role)).To(Succeed())
	role.Name = "e2e-prometheus-metrics-reader"
	_, err = st.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: systemNamespace}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		_ = st.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		_ = st.cs.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	token := func(sa string) string {
		_, err := st.cs.CoreV1().ServiceAccounts(systemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() {
			_ = st.cs.CoreV1().ServiceAccounts(systemNamespace).Delete(context.Background(), sa, metav1.DeleteOptions{})
		})
		tr, err := st.cs.CoreV1().ServiceAccounts(systemNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}
	return token("prometheus"), token("metrics-stranger")
}

// scrapeOperator gets the operator's /metrics over HTTPS (its certificate
// is self-signed) with a bearer token ("" for none).
func scrapeOperator(ctx context.Context, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+st.operatorMetrics+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // self-signed by design
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestPrometheusScrapesClusterProcesses has a real Prometheus
// (hack/prometheus.sh) scrape the cluster processes: the gateway's
// /metrics, a session pod's (the operator's --session-metrics-port, on the
// pod's own address) and the operator's HTTPS endpoint with the token of a
// ServiceAccount bound to the shipped metrics-reader role; a token without
// that binding is refused (and Prometheus's scrape with it is down). After a
// turn with a tool call, a turn the model refuses and a CronJob's fire,
// Prometheus's HTTP API answers with the PicoBot series of each process.
func TestPrometheusScrapesClusterProcesses(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns, key := "tenant-prometheus", "tenant-prometheus-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		switch text := lastUser(r); {
		case last.Role == "tool" || len(last.ToolResults) > 0:
			return fakellm.Turn{Text: "It is 42."}
		case strings.Contains(text, "compute"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}}
		case strings.Contains(text, "refuse"):
			return fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: "content policy"}
		case strings.Contains(text, "water the plants"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "complete_scheduled_run", Args: `{"outcome":"ok","message":"Watered."}`}}}
		}
		return fakellm.Turn{Text: "Scraped."}
	})
	st.apply(t, fmt.Sprintf(scrapedManifest, ns, key, st.llm.URL()))
	var pod corev1.Pod
	g.Eventually(func(g Gomega) {
		var a picobotv1alpha1.Agent
		g.Expect(st.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "helper"}, &a)).To(Succeed())
		g.Expect(a.Status.WarmPods).To(HaveValue(Equal(int32(1))))
		pods := st.pods(t, ns, "helper")
		g.Expect(pods).To(HaveLen(1))
		g.Expect(pods[0].Status.PodIP).NotTo(BeEmpty())
		pod = pods[0]
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())

	// The operator's endpoint authenticates and authorizes every caller.
	reader, stranger := metricsReaders(t)
	code, _, err := scrapeOperator(ctx, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusUnauthorized), "no token")
	code, _, err = scrapeOperator(ctx, stranger)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), "a ServiceAccount without the metrics-reader binding")
	g.Eventually(func(g Gomega) {
		code, body, err := scrapeOperator(ctx, reader)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(ContainSubstring("picobot_pool_pods{"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "the binding reaches the authorizer")

	prom := services.StartPrometheus(t,
		services.ScrapeTarget{Job: "gateway", Addr: st.gatewayMetrics},
		services.ScrapeTarget{Job: "session-pod", Addr: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(sessionMetricsPort))},
		services.ScrapeTarget{Job: "operator", Addr: st.operatorMetrics, HTTPS: true, BearerToken: reader},
		services.ScrapeTarget{Job: "operator-stranger", Addr: st.operatorMetrics, HTTPS: true, BearerToken: stranger})

	// A turn with a tool call, a turn the model refuses, and a CronJob's
	// fire (run by a session pod the operator wakes).
	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(t)
	frames := ws.Exchange(t, gatewaytest.Frame{"id": "prom-1", "agent": "helper", "chat_id": "prom", "text": "compute 6*7"})
	final := gatewaytest.Event(frames, "final")
	g.Expect(final).NotTo(BeNil(), "frames: %v", frames)
	g.Expect(final["text"]).To(Equal("It is 42."))
	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "prom-2", "agent": "helper", "chat_id": "prom", "text": "refuse this"})
	frames = ws.Until(t, "prom-2", "final")
	g.Expect(frames[len(frames)-1]).To(And(HaveKeyWithValue("type", "error"), HaveKeyWithValue("code", "model_rejected")), "frames: %v", frames)
	st.apply(t, fmt.Sprintf(`
apiVersion: agents.picobot.io/v1alpha1
kind: CronJob
metadata: {name: plants, namespace: %s}
spec:
  schedule: {at: %d}
  prompt: water the plants
  agentRef: {name: helper}
  deliveryPolicy: never
`, ns, time.Now().Add(3*time.Second).UnixMilli()))

	for _, c := range []struct {
		what, query string
		atLeast     float64
	}{
		{"the gateway is up", `up{job="gateway"}`, 1},
		{"the session pod is up", `up{job="session-pod"}`, 1},
		{"the operator is up, scraped with the reader's token", `up{job="operator"}`, 1},
		{"the gateway's WebSocket frames", `sum(picobot_gateway_frames_total{job="gateway", direction="in"})`, 1},
		{"the gateway's publish of the message", fmt.Sprintf(`sum(picobot_bus_published_total{job="gateway", tenant=%q, stream="chat"})`, ns), 1},
		{"the session pod's turn", fmt.Sprintf(`sum(picobot_turns_total{job="session-pod", tenant=%q, agent="helper", outcome="ok"})`, ns), 1},
		{"the session pod's model calls", fmt.Sprintf(`sum(picobot_model_calls_total{job="session-pod", tenant=%q, outcome="ok"})`, ns), 2},
		{"the session pod's tool call", fmt.Sprintf(`sum(picobot_tool_calls_total{job="session-pod", tenant=%q, tool="calculator", outcome="ok"})`, ns), 1},
		{"the session pod's refused turn", fmt.Sprintf(`sum(picobot_turns_total{job="session-pod", tenant=%q, outcome="model_rejected"})`, ns), 1},
		{"the model's refusal", fmt.Sprintf(`sum(picobot_model_calls_total{job="session-pod", tenant=%q, outcome="400"})`, ns), 1},
		{"the warm session pod's claim of the chat", fmt.Sprintf(`sum(picobot_pool_claims_total{job="session-pod", tenant=%q, agent="helper", kind="warm"})`, ns), 1},
		{"the session lease the pod holds until the chat is idle", fmt.Sprintf(`sum(picobot_sessions_leased{job="session-pod", tenant=%q, agent="helper"})`, ns), 1},
		{"the operator's CronJob run", fmt.Sprintf(`sum(picobot_cron_runs_total{job="operator", namespace=%q})`, ns), 1},
		{"the operator's fire lag", fmt.Sprintf(`sum(picobot_cron_fire_lag_seconds_count{job="operator", namespace=%q})`, ns), 1},
		{"the operator's warm pool size", fmt.Sprintf(`picobot_pool_warm_target{job="operator", namespace=%q, agent="helper"}`, ns), 1},
		{"the operator's pod start latency", fmt.Sprintf(`sum(picobot_pool_pod_start_seconds_count{job="operator", namespace=%q})`, ns), 1},
		{"the operator's reading of Redis, one series per stream kind", fmt.Sprintf(`count(picobot_bus_streams{job="operator", namespace=%q})`, ns), 3},
		{"controller-runtime's reconciles beside them", `sum(controller_runtime_reconcile_total{job="operator", controller="agent"})`, 1},
	} {
		g.Eventually(func() (float64, error) { return prom.Scalar(ctx, c.query) }, 90*time.Second, 500*time.Millisecond).Should(
			BeNumerically(">=", c.atLeast), "%s: %s", c.what, c.query)
	}
	g.Eventually(func() (float64, error) { return prom.Scalar(ctx, `up{job="operator-stranger"}`) }, 30*time.Second, 500*time.Millisecond).Should(
		Equal(0.0), "the scrape with the stranger's token is refused")
}
