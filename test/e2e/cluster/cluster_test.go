// Package cluster runs cluster mode end to end on one machine: the real
// kube-apiserver + etcd, the operator and gateway binaries as processes,
// session pods run by the local pod runner as processes of the picobot
// binary, real PostgreSQL, Redis and an S3-protocol server, and the scripted
// fake LLM. Agents and API keys are applied with the real kubectl.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/cluster"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/podrunner"
	"github.com/picobot/picobot/test/services"
)

// image is the runtime image name the pod runner maps to the picobot binary.
const image = "local/picobot:e2e"

// systemNamespace is the namespace of the gateway (and operator).
const systemNamespace = "picobot-system"

// stack is everything a cluster-mode test talks to.
type stack struct {
	env        *controlplane.Environment
	kube       client.Client
	cs         kubernetes.Interface
	redis      *redis.Client
	llm        *fakellm.Server
	runner     *podrunner.Runner
	gatewayURL string
	conn       []string // connection environment of gateway, operator and pods
	// operatorEnv is the operator's alone: the PostgreSQL owner and the key
	// it derives each tenant's passwords from. Session pods get their
	// tenant's own role and Redis user from the Secret it writes.
	operatorEnv []string
	// pgServer and redisServer are the servers this package started, which
	// tests may restart; nil when PICOBOT_TEST_*_URL names a shared one.
	pgServer    *services.PostgresServer
	redisServer *services.RedisServer
	dir         string
	kubectl     string
	picobot     string
	operator    string
	// mcpProbe is a hostile MCP stdio server (test/mcpprobe).
	mcpProbe   string
	logs       []string
	gatewayLog string
	// traces receives the spans of the gateway, the operator's session
	// pods and the operator over OTLP/gRPC (the OTEL_* settings in conn).
	traces *tracingtest.Receiver
	// gatewayMetrics and operatorMetrics are the host:port of the
	// gateway's /metrics (plain HTTP) and the operator's (HTTPS, callers
	// authenticated and authorized by the API server). Session pods serve
	// theirs on sessionMetricsPort at their pod IP.
	gatewayMetrics, operatorMetrics string
}

// sessionMetricsPort is the operator's --session-metrics-port: the local pod
// runner puts each pod's listener on the pod's own address, so every pod
// serves it.
const sessionMetricsPort = 9090

var (
	st         *stack
	skipReason string
)

func TestMain(m *testing.M) {
	s, stop, err := start()
	if err != nil {
		var unavailable unavailableError
		if errors.As(err, &unavailable) && os.Getenv("CI") == "" {
			skipReason = err.Error()
			fmt.Fprintln(os.Stderr, "SKIPPING cluster e2e:", skipReason)
			os.Exit(m.Run())
		}
		fmt.Fprintln(os.Stderr, "cluster e2e set-up failed:", err)
		os.Exit(1)
	}
	st = s
	code := m.Run()
	if code != 0 {
		for _, l := range s.logs {
			fmt.Fprintf(os.Stderr, "==== %s (tail)\n%s\n", l, tail(l, 40))
		}
	}
	stop()
	os.Exit(code)
}

type unavailableError struct{ error }

func start() (*stack, func(), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (*stack, func(), error) { stopAll(); return nil, nil, err }
	root, err := controlplane.RepoRoot()
	if err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp("", "picobot-cluster-e2e-")
	if err != nil {
		return fail(err)
	}
	// PICOBOT_KEEP_E2E keeps the folder (binaries, every process's and
	// pod's log) for a post-mortem.
	if os.Getenv("PICOBOT_KEEP_E2E") == "" {
		stops = append(stops, func() { _ = os.RemoveAll(dir) })
	} else {
		fmt.Fprintln(os.Stderr, "cluster e2e: keeping", dir)
	}
	s := &stack{dir: dir, picobot: filepath.Join(dir, "picobot"), operator: filepath.Join(dir, "operator"), mcpProbe: filepath.Join(dir, "mcpprobe")}
	for bin, pkg := range map[string]string{s.picobot: "./runtime/cmd/picobot", s.operator: "./operator/cmd", s.mcpProbe: "./test/mcpprobe"} {
		b := exec.Command("go", "build", "-o", bin, pkg)
		b.Dir, b.Stdout, b.Stderr = root, os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fail(fmt.Errorf("failed to build %s: %w", pkg, err))
		}
	}
	if s.kubectl, err = exec.LookPath("kubectl"); err != nil {
		assets, aerr := controlplane.AssetsDir()
		if aerr != nil {
			return fail(aerr)
		}
		s.kubectl = filepath.Join(assets, "kubectl")
	}

	s.env, err = controlplane.Start()
	if err != nil {
		reason, _ := controlplane.Unavailable(err)
		return fail(unavailableError{errors.New(reason)})
	}
	stops = append(stops, func() { _ = s.env.Stop() })
	if s.kube, err = client.New(s.env.Config, client.Options{Scheme: cluster.NewScheme()}); err != nil {
		return fail(err)
	}
	if s.cs, err = kubernetes.NewForConfig(s.env.Config); err != nil {
		return fail(err)
	}

	pgDSN, stopPG, err := s.postgres()
	if err != nil {
		reason, _ := services.Unavailable("PostgreSQL", err)
		return fail(unavailableError{errors.New(reason)})
	}
	stops = append(stops, stopPG)
	redisURL, stopRedis, err := s.startRedis()
	if err != nil {
		reason, _ := services.Unavailable("Redis", err)
		return fail(unavailableError{errors.New(reason)})
	}
	stops = append(stops, stopRedis)
	s3URL, stopS3, err := services.S3()
	if err != nil {
		reason, _ := services.Unavailable("S3", err)
		return fail(unavailableError{errors.New(reason)})
	}
	stops = append(stops, stopS3)
	ropt, err := redis.ParseURL(redisURL)
	if err != nil {
		return fail(err)
	}
	s.redis = redis.NewClient(ropt)
	stops = append(stops, func() { _ = s.redis.Close() })

	appDSN, ownerDSN, err := database(pgDSN)
	if err != nil {
		return fail(err)
	}
	s3u, err := url.Parse(s3URL)
	if err != nil {
		return fail(err)
	}
	s3Key, s3Secret := "e2e", "e2e-secret"
	if s3u.User != nil {
		s3Key = s3u.User.Username()
		s3Secret, _ = s3u.User.Password()
		s3u.User = nil
	}
	rcv, stopTraces, err := tracingtest.New()
	if err != nil {
		return fail(err)
	}
	s.traces = rcv
	stops = append(stops, stopTraces)
	s.conn = []string{
		"PICOBOT_POSTGRES_URL=" + appDSN, "PICOBOT_REDIS_URL=" + redisURL,
		"PICOBOT_S3_ENDPOINT=" + s3u.String(), "PICOBOT_S3_BUCKET=picobot-e2e", "PICOBOT_S3_REGION=us-east-1", "PICOBOT_S3_PATH_STYLE=true",
		"AWS_ACCESS_KEY_ID=" + s3Key, "AWS_SECRET_ACCESS_KEY=" + s3Secret,
		// Every process traces (docs/tracing.md), exporting often, as a
		// deployment with a collector would: the operator passes these
		// on to session pods.
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.GRPCEndpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100",
	}
	mig := exec.Command(s.picobot, "migrate", "--app-role=picobot_e2e")
	mig.Env = append(append(os.Environ(), s.conn...), "PICOBOT_POSTGRES_OWNER_URL="+ownerDSN)
	if out, err := mig.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("picobot migrate: %w\n%s", err, out))
	}

	s.operatorEnv = []string{"PICOBOT_POSTGRES_OWNER_URL=" + ownerDSN, "PICOBOT_TENANT_CREDENTIALS_KEY=e2e-derivation-key-0123456789abcdef"}

	s.llm = fakellm.New()
	stops = append(stops, s.llm.Close)

	ctx, cancel := context.WithCancel(context.Background())
	s.runner = podrunner.New(podrunner.Config{Client: s.cs, Images: map[string]string{image: s.picobot, browserPodImage: s.picobot}, WorkDir: filepath.Join(dir, "pods"),
		Env: []string{"KUBECONFIG=" + s.env.KubeconfigPath}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	_ = os.MkdirAll(filepath.Join(dir, "pods"), 0o700)
	runDone := make(chan struct{})
	go func() { _ = s.runner.Run(ctx); close(runDone) }()
	stops = append(stops, func() { cancel(); <-runDone })

	// The gateway's namespace, where the operator publishes API-key hashes
	// (the gateway reads no tenant's Secret).
	_, err = s.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}, metav1.CreateOptions{})
	if err != nil {
		return fail(fmt.Errorf("failed to create namespace %s: %w", systemNamespace, err))
	}
	// The gateway first: the operator gives session pods its blob grant
	// service's address.
	gwLog := filepath.Join(dir, "gateway.log")
	s.logs = append(s.logs, gwLog)
	s.gatewayLog = gwLog
	urlc, blobc := make(chan string, 1), make(chan string, 1)
	gwPort, err := services.FreePort()
	if err != nil {
		return fail(err)
	}
	opPort, err := services.FreePort()
	if err != nil {
		return fail(err)
	}
	s.gatewayMetrics, s.operatorMetrics = fmt.Sprintf("127.0.0.1:%d", gwPort), fmt.Sprintf("127.0.0.1:%d", opPort)
	stopGW, err := s.spawn(gwLog, func(line string) {
		if m := servingRE.FindStringSubmatch(line); m != nil {
			urlc <- m[1]
		}
		if m := blobGrantsRE.FindStringSubmatch(line); m != nil {
			blobc <- m[1]
		}
	}, s.picobot, "gateway", "--addr=127.0.0.1:0", "--blob-addr=127.0.0.1:0", "--metrics-addr="+s.gatewayMetrics, "--reply-timeout=2m", "--run-watch-grace=3s", "--namespace="+systemNamespace)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, stopGW)
	var blobURL string
	for s.gatewayURL == "" || blobURL == "" {
		select {
		case s.gatewayURL = <-urlc:
		case blobURL = <-blobc:
		case <-time.After(2 * time.Minute):
			return fail(fmt.Errorf("the gateway did not start; log:\n%s", tail(gwLog, 40)))
		}
	}

	opLog := filepath.Join(dir, "operator.log")
	s.logs = append(s.logs, opLog)
	stopOp, err := s.spawn(opLog, nil, s.operator, "--kubeconfig="+s.env.KubeconfigPath, "--metrics-bind-address="+s.operatorMetrics,
		fmt.Sprintf("--session-metrics-port=%d", sessionMetricsPort),
		"--health-probe-bind-address=127.0.0.1:0", "--runtime-image="+image, "--allowed-images=registry.example/*", "--browser-image="+browserPodImage,
		"--session-lease-ttl=3s", "--zap-log-level=info", "--blob-url="+blobURL, "--gateway-namespace="+systemNamespace,
		fmt.Sprintf("--tenant-role-prefix=pbe2e_%d_", os.Getpid()), fmt.Sprintf("--tenant-user-prefix=pbe2e-%d-", os.Getpid()))
	if err != nil {
		return fail(err)
	}
	stops = append(stops, stopOp)
	return s, stopAll, nil
}

// postgres starts the package's PostgreSQL, unless one is configured.
func (s *stack) postgres() (string, func(), error) {
	if os.Getenv(services.PostgresURLEnv) != "" {
		return services.Postgres()
	}
	srv, err := services.StartPostgres()
	if err != nil {
		return "", nil, err
	}
	s.pgServer = srv
	return srv.DSN, func() { _ = srv.Stop() }, nil
}

// startRedis starts the package's Redis, unless one is configured. It runs
// with the append-only file, as production does: the bus is only as durable
// as Redis, and the restart test checks that no queued message is lost.
func (s *stack) startRedis() (string, func(), error) {
	if os.Getenv("PICOBOT_TEST_REDIS_URL") != "" {
		return services.Redis()
	}
	srv, err := services.StartRedis(true)
	if err != nil {
		return "", nil, err
	}
	s.redisServer = srv
	return srv.URL, func() { _ = srv.Stop() }, nil
}

var (
	servingRE    = regexp.MustCompile(`PicoBot gateway is serving (http://\S+)/`)
	blobGrantsRE = regexp.MustCompile(`PicoBot gateway serves blob grants on (http://\S+)/`)
)

// spawn starts a process with the connection environment, logging to path;
// onLine sees each stderr line.
func (s *stack) spawn(path string, onLine func(string), bin string, args ...string) (func(), error) {
	logf, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), s.conn...), "KUBECONFIG="+s.env.KubeconfigPath)
	if bin == s.operator {
		cmd.Env = append(cmd.Env, s.operatorEnv...)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = logf, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			_, _ = logf.WriteString(sc.Text() + "\n")
			if onLine != nil {
				onLine(sc.Text())
			}
		}
	})
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(done) }()
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		wg.Wait()
		_ = logf.Close()
	}, nil
}

// database creates a fresh database and an application role, returning the
// role's DSN and the owner's.
func database(adminDSN string) (app, owner string, err error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	name := fmt.Sprintf("picobot_e2e_%d", os.Getpid())
	if _, err := conn.Exec(ctx, `DO $$ BEGIN CREATE ROLE picobot_e2e LOGIN PASSWORD 'e2e'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`); err != nil {
		return "", "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", err
	}
	u, err := url.Parse(adminDSN)
	if err != nil {
		return "", "", err
	}
	u.Path = "/" + name
	owner = u.String()
	u.User = url.UserPassword("picobot_e2e", "e2e")
	return u.String(), owner, nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func needStack(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip("SKIPPED LOUDLY: " + skipReason)
	}
}

// apply runs kubectl apply with a manifest.
func (s *stack) apply(tb testing.TB, manifest string) {
	tb.Helper()
	cmd := exec.Command(s.kubectl, "--kubeconfig", s.env.KubeconfigPath, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// pods lists an agent's session pods that are not finished.
func (s *stack) pods(tb testing.TB, ns, agentName string) []corev1.Pod {
	tb.Helper()
	var list corev1.PodList
	if err := s.kube.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{picobotv1alpha1.LabelAgent: agentName}); err != nil {
		tb.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// busyPod returns the pod serving a chat, from the pods' registry.
func (s *stack) busyPod(ns, agentName, chatKey string) string {
	reg, err := s.redis.HGetAll(context.Background(), wake.PodsKey(ns, agentName)).Result()
	if err != nil {
		return ""
	}
	for pod, state := range reg {
		if strings.HasSuffix(state, " "+chatKey) {
			return pod
		}
	}
	return ""
}

// waitReady waits for an Agent's Ready condition.
func (s *stack) waitReady(tb testing.TB, ns, name string) {
	tb.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var a picobotv1alpha1.Agent
		if err := s.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &a); err == nil &&
			meta.IsStatusConditionTrue(a.Status.Conditions, picobotv1alpha1.ConditionReady) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	tb.Fatalf("agent %s/%s did not become Ready", ns, name)
}
