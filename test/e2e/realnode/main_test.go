// Package realnode runs cluster mode on a real single-node Kubernetes
// (hack/realnode.sh): kubelet and containerd run the project's own image,
// built without Docker (hack/realnode-images.sh) and imported into the node;
// the chart is installed with the real helm; Agents are applied with the real
// kubectl; a chat goes through the gateway's Service over kubectl
// port-forward to a session pod the operator started. PostgreSQL, Redis, the
// S3-protocol server and the scripted fake LLM run on the host, reached by
// the pods through the node (test/realnode bridges): the three stores on the
// node address at their usual ports, which the install lists as external
// services (--service-cidrs), and the LLM on an address outside every private
// range, as a model endpoint on the internet is. kube-router enforces the
// NetworkPolicies, so the session pods reach them as they would on a cluster.
//
// It needs root and, the first time, half an hour of builds; it runs when
// PICOBOT_E2E_REALNODE=1 (and is skipped, loudly, otherwise).
// PICOBOT_KEEP_E2E=1 leaves the node up for a post-mortem
// (hack/realnode.sh kubectl ..., then hack/realnode.sh down).
package realnode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/realnode"
	"github.com/picobot/picobot/test/repo"
	"github.com/picobot/picobot/test/services"
)

const (
	// EnableEnv turns the tests on.
	EnableEnv = "PICOBOT_E2E_REALNODE"
	// release and systemNamespace are the chart's release and namespace.
	release         = "picobot"
	systemNamespace = "picobot-system"
	imageRepo       = "localhost/picobot"
	imageTag        = "e2e"
)

// The node ports of PostgreSQL, Redis and S3: among the operator's default
// --service-ports.
const (
	pgPort    = "5432"
	redisPort = "6379"
	s3Port    = "9000"
)

// stack is the node, the host's servers and the installed release.
type stack struct {
	node  *realnode.Node
	llm   *fakellm.Server
	redis *redis.Client
	// llmURL is the fake LLM's base URL as pods reach it.
	llmURL string
	// pgHost is PostgreSQL's address on the host.
	pgHost string
	helm   string
	root   string
	dir    string
	// values is the values file of the install.
	values string
}

var (
	st         *stack
	skipReason string
)

func TestMain(m *testing.M) {
	if os.Getenv(EnableEnv) == "" {
		skipReason = EnableEnv + " is not set (the real-node e2e needs root and builds kubelet & co. the first time)"
		fmt.Fprintln(os.Stderr, "SKIPPING real-node e2e:", skipReason)
		os.Exit(m.Run())
	}
	if reason := realnode.Unavailable(); reason != "" {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "real-node e2e cannot run:", reason)
			os.Exit(1)
		}
		skipReason = reason
		fmt.Fprintln(os.Stderr, "SKIPPING real-node e2e:", reason)
		os.Exit(m.Run())
	}
	s, stop, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "real-node e2e set-up failed:", err)
		if stop != nil {
			stop()
		}
		os.Exit(1)
	}
	st = s
	code := m.Run()
	if code != 0 {
		s.dumpState()
	}
	stop()
	os.Exit(code)
}

func needStack(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip("SKIPPED LOUDLY: " + skipReason)
	}
}

// start brings up the node and the host's servers, and installs the chart.
// The returned stop undoes what was done, also after an error.
func start() (*stack, func(), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	root, err := repo.Root()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "picobot-realnode-e2e-")
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	s := &stack{root: root, dir: dir}

	archive, err := hack(root, "realnode-images.sh", "picobot", imageTag)
	if err != nil {
		return nil, stopAll, err
	}
	if s.helm, err = hack(root, "tool.sh", "helm"); err != nil {
		return nil, stopAll, err
	}
	if s.node, err = realnode.Up(); err != nil {
		return nil, stopAll, err
	}
	if os.Getenv("PICOBOT_KEEP_E2E") == "" {
		stops = append(stops, func() {
			if err := s.node.Down(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
	} else {
		fmt.Fprintln(os.Stderr, "real-node e2e: keeping the node up; hack/realnode.sh down removes it")
	}
	if err := s.node.Import(archive); err != nil {
		return nil, stopAll, err
	}

	// The host's servers, and bridges to them on the node's addresses.
	expose := func(nodeAddr, hostport string) (string, error) {
		b, err := s.node.ExposeAt(nodeAddr, hostport)
		if err != nil {
			return "", err
		}
		stops = append(stops, b.Close)
		return b.Addr, nil
	}
	pgDSN, stopPG, err := services.Postgres()
	if err != nil {
		return nil, stopAll, fmt.Errorf("failed to start PostgreSQL: %w", err)
	}
	stops = append(stops, stopPG)
	redisURL, stopRedis, err := services.Redis()
	if err != nil {
		return nil, stopAll, fmt.Errorf("failed to start Redis: %w", err)
	}
	stops = append(stops, stopRedis)
	s3URL, stopS3, err := services.S3()
	if err != nil {
		return nil, stopAll, fmt.Errorf("failed to start the S3 server: %w", err)
	}
	stops = append(stops, stopS3)
	s.llm = fakellm.New()
	stops = append(stops, s.llm.Close)
	ropt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, stopAll, err
	}
	s.redis = redis.NewClient(ropt)
	stops = append(stops, func() { _ = s.redis.Close() })

	appDSN, ownerDSN, err := database(pgDSN)
	if err != nil {
		return nil, stopAll, err
	}
	s.pgHost = mustURL(pgDSN).Host
	// The stores on the service ports the session pods' NetworkPolicy admits
	// (the operator's --service-ports), the LLM on any port of a public
	// address.
	nodeAddrs := map[string]string{
		"pg":    net.JoinHostPort(realnode.NodeIP, pgPort),
		"redis": net.JoinHostPort(realnode.NodeIP, redisPort),
		"s3":    net.JoinHostPort(realnode.NodeIP, s3Port),
		"llm":   net.JoinHostPort(realnode.PublicIP, "0"),
	}
	nodeURL := map[string]string{}
	for name, u := range map[string]string{"pg": appDSN, "redis": redisURL, "s3": s3URL, "llm": s.llm.URL()} {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil, stopAll, fmt.Errorf("failed to parse %s URL: %w", name, err)
		}
		addr, err := expose(nodeAddrs[name], parsed.Host)
		if err != nil {
			return nil, stopAll, err
		}
		parsed.Host = addr
		nodeURL[name] = parsed.String()
	}
	s.llmURL = nodeURL["llm"]
	nodePG := func(dsn string) string {
		u := mustURL(dsn)
		u.Host = mustURL(nodeURL["pg"]).Host
		return u.String()
	}
	s3u := mustURL(nodeURL["s3"])
	// The S3 server takes any key unless its URL carries one.
	s3Key, s3Secret := "e2e", "e2e-secret"
	if s3u.User != nil {
		s3Key = s3u.User.Username()
		s3Secret, _ = s3u.User.Password()
		s3u.User = nil
	}

	ctx := context.Background()
	if _, err := s.node.Kubectl(ctx, "create", "namespace", systemNamespace); err != nil {
		return nil, stopAll, err
	}
	secrets := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: e2e-postgres, namespace: %[1]s}
stringData: {url: %[2]q, ownerUrl: %[3]q}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-redis, namespace: %[1]s}
stringData: {url: %[4]q}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-s3, namespace: %[1]s}
stringData: {accessKeyId: %[5]q, secretAccessKey: %[6]q}
`, systemNamespace, nodePG(appDSN), nodePG(ownerDSN), nodeURL["redis"], s3Key, s3Secret)
	if _, err := s.node.KubectlIn(ctx, secrets, "apply", "-f", "-"); err != nil {
		return nil, stopAll, err
	}
	s.values = filepath.Join(dir, "values.yaml")
	values := fmt.Sprintf(`image: {repository: %[1]s, tag: %[2]s, pullPolicy: Never}
browserImage: {repository: localhost/picobot-browser, tag: %[2]s}
operator:
  replicaCount: 1
  # A killed session pod's chat moves to another pod after this. The
  # stores are external, on the node address: the session pods'
  # NetworkPolicy admits it on the service ports.
  extraArgs: [--session-lease-ttl=3s, --service-cidrs=%[4]s/32]
gateway: {replicaCount: 1}
postgres:
  appRole: picobot_app
  external: {existingSecret: e2e-postgres}
  bundled: {enabled: false}
redis:
  external: {existingSecret: e2e-redis}
  bundled: {enabled: false}
s3:
  bucket: picobot-e2e
  external: {endpoint: %[3]q, pathStyle: true, existingSecret: e2e-s3}
  bundled: {enabled: false}
`, imageRepo, imageTag, s3u.String(), realnode.NodeIP)
	if err := os.WriteFile(s.values, []byte(values), 0o600); err != nil {
		return nil, stopAll, err
	}
	start := time.Now()
	if out, err := s.helmRun(ctx, "install", release, filepath.Join(root, "charts", "picobot"), "--namespace", systemNamespace,
		"--values", s.values, "--wait", "--timeout", "5m"); err != nil {
		s.dumpState()
		return nil, stopAll, fmt.Errorf("helm install: %w\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "real-node e2e: helm install --wait took %s\n", time.Since(start).Round(time.Millisecond))
	return s, stopAll, nil
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// hack runs hack/<script> and returns its last line of output.
func hack(root, script string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", script), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s %s: %w", script, strings.Join(args, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// helmRun runs helm inside the node's network namespace.
func (s *stack) helmRun(ctx context.Context, args ...string) (string, error) {
	cmd := s.node.Command(ctx, s.helm, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// database makes a fresh database and the chart's application role, and
// returns the role's DSN and the owner's (the server's superuser).
func database(adminDSN string) (app, owner string, err error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", "", fmt.Errorf("failed to connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := fmt.Sprintf("picobot_realnode_%d", os.Getpid())
	if _, err := conn.Exec(ctx, `DO $$ BEGIN CREATE ROLE picobot_app LOGIN PASSWORD 'e2e'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`); err != nil {
		return "", "", fmt.Errorf("failed to create role picobot_app: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("failed to create database %q: %w", name, err)
	}
	u, err := url.Parse(adminDSN)
	if err != nil {
		return "", "", err
	}
	u.Path = "/" + name
	owner = u.String()
	u.User = url.UserPassword("picobot_app", "e2e")
	return u.String(), owner, nil
}

// dumpState prints what a failed run needs: pods, events, and the logs of
// the release's and the tenants' pods.
func (s *stack) dumpState() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := s.node.Kubectl(ctx, "get", "pods,events", "-A", "-o", "wide")
	fmt.Fprintf(os.Stderr, "==== pods and events\n%s\n", out)
	names, _ := s.node.Kubectl(ctx, "get", "pods", "-A", "-o", `jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}`)
	for _, nn := range strings.Fields(names) {
		ns, name, _ := strings.Cut(nn, "/")
		logs, _ := s.node.Kubectl(ctx, "logs", "-n", ns, name, "--all-containers", "--tail", "40")
		fmt.Fprintf(os.Stderr, "==== logs of %s\n%s\n", nn, logs)
	}
}

var forwardingRE = regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) ->`)

// portForward runs kubectl port-forward to target (e.g. svc/x) port in
// namespace ns inside the node, and bridges it to a host address.
func (s *stack) portForward(tb testing.TB, ns, target, port string) string {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := s.node.Command(ctx, "kubectl", "port-forward", "-n", ns, "--address", "127.0.0.1", target, ":"+port)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cancel(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwardingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	var nodeAddr string
	select {
	case nodeAddr = <-found:
	case <-time.After(30 * time.Second):
		tb.Fatalf("kubectl port-forward %s did not start", target)
	}
	b, err := s.node.Forward(nodeAddr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	// The bridge's address is a loopback address of the host.
	if _, _, err := net.SplitHostPort(b.Addr); err != nil {
		tb.Fatal(err)
	}
	return b.Addr
}
