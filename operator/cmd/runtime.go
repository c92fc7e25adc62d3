package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/picobot/picobot/operator/internal/controller"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/blob/remoteblob"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/quota"
)

// runtimeOptions are the flags of session pods. Without --runtime-image the
// operator only publishes status (no Redis needed).
type runtimeOptions struct {
	image           string
	browserImage    string
	redisURL        string
	leaseTTL        time.Duration
	idleTimeout     time.Duration
	systemNamespace string
	servicePorts    string
	serviceCIDRs    string
	blobURL         string
	metricsPort     int
	metricsFrom     string
	sandbox         string
	policy          policyOptions
	tenants         tenantOptions
}

func (r *runtimeOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&r.image, "runtime-image", os.Getenv("PICOBOT_RUNTIME_IMAGE"), "Image of session pods (default $PICOBOT_RUNTIME_IMAGE); empty disables session pods.")
	fs.StringVar(&r.browserImage, "browser-image", os.Getenv("PICOBOT_BROWSER_IMAGE"), "Image of browser pods (default $PICOBOT_BROWSER_IMAGE).")
	fs.StringVar(&r.redisURL, "redis-url", os.Getenv(wake.ConnectionEnv[1]), "Redis of the wake streams (default $PICOBOT_REDIS_URL).")
	fs.DurationVar(&r.leaseTTL, "session-lease-ttl", 0, "Lease TTL of session pods (0: the runtime's default, 30s); a dead pod's chat moves after it.")
	fs.DurationVar(&r.idleTimeout, "session-idle-timeout", 0, "Override every Agent's runtime.idleTimeout (0: use the Agent's).")
	fs.StringVar(&r.systemNamespace, "system-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of PostgreSQL/Redis/S3 that session pods may reach.")
	fs.StringVar(&r.servicePorts, "service-ports", "5432,6379,8333,9000,443,8090", "Ports session pods may reach in the system namespace (8090: the gateway's blob grant service).")
	fs.StringVar(&r.serviceCIDRs, "service-cidrs", "", "Comma-separated CIDRs of external PostgreSQL/Redis/S3 that session pods may reach.")
	fs.StringVar(&r.blobURL, "blob-url", os.Getenv(remoteblob.EnvURL), "URL of the blob grant service (the gateway's --blob-addr) that session pods get presigned S3 requests from; they hold no S3 credential (default $PICOBOT_BLOB_URL; empty: session pods have no artifact store).")
	// Off by default: processes standing in for pods on one host (local
	// runs, the end-to-end tests) would share the port. The chart and the
	// kustomize install turn it on.
	fs.IntVar(&r.metricsPort, "session-metrics-port", 0, "Port session pods serve PicoBot's metrics on (their container port \"metrics\", e.g. 9090), admitted by their NetworkPolicy; 0: they serve none.")
	fs.StringVar(&r.sandbox, "sandbox-placement", string(podspec.SandboxInContainer), `Where the tools' programs of a session pod run: "container" (a sandbox container of the session pod, reached over a Unix socket; the pod's NetworkPolicy covers both containers) or "pod" (a sandbox pod of their own per session pod, reached over TLS, with the NetworkPolicy picobot-sandbox-pods: no way to the system namespace by address).`)
	fs.StringVar(&r.metricsFrom, "session-metrics-from", "", `Who may scrape session pods' metrics: a JSON list of NetworkPolicyPeer objects (e.g. [{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]); empty: anyone.`)
	r.policy.bindFlags(fs)
	r.tenants.bindFlags(fs)
}

// sessionMetrics returns the session pods' metrics port and who may scrape
// it, from --session-metrics-port and --session-metrics-from.
func (r *runtimeOptions) sessionMetrics() (int32, []networkingv1.NetworkPolicyPeer, error) {
	if r.metricsPort < 0 || r.metricsPort > 65535 {
		return 0, nil, fmt.Errorf("--session-metrics-port: %d is not a port (1-65535, or 0 for none)", r.metricsPort)
	}
	var from []networkingv1.NetworkPolicyPeer
	if strings.TrimSpace(r.metricsFrom) != "" {
		// Strict: a misspelt selector would otherwise admit anyone.
		if err := yaml.UnmarshalStrict([]byte(r.metricsFrom), &from); err != nil {
			return 0, nil, fmt.Errorf("--session-metrics-from: not a JSON list of NetworkPolicyPeer objects: %w", err)
		}
		for i, p := range from {
			if p.PodSelector == nil && p.NamespaceSelector == nil && p.IPBlock == nil {
				return 0, nil, fmt.Errorf("--session-metrics-from: peer %d names no podSelector, namespaceSelector or ipBlock", i)
			}
		}
	}
	return int32(r.metricsPort), from, nil
}

func (r *runtimeOptions) config(ctx context.Context, mgr ctrl.Manager) (*controller.RuntimeConfig, func(), error) {
	if r.image == "" {
		return nil, func() {}, nil
	}
	if r.redisURL == "" {
		return nil, nil, fmt.Errorf("--runtime-image needs --redis-url or $PICOBOT_REDIS_URL")
	}
	metricsPort, metricsFrom, err := r.sessionMetrics()
	if err != nil {
		return nil, nil, err
	}
	sandbox, err := podspec.ParseSandboxPlacement(r.sandbox)
	if err != nil {
		return nil, nil, fmt.Errorf("--sandbox-placement: %w", err)
	}
	pol, err := r.policy.policy()
	if err != nil {
		return nil, nil, err
	}
	b, err := redisbus.Open(r.redisURL, redisbus.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to connect to Redis: %w", err)
	}
	if r.blobURL == "" {
		ctrl.Log.Info("Session pods get no artifact store: --blob-url is not set, and no S3 setting goes into tenant namespaces")
	}
	conn := map[string]string{}
	for _, k := range wake.ConnectionEnv {
		if v := os.Getenv(k); v != "" {
			conn[k] = v
		}
	}
	tenants, closeTenants, err := r.tenants.connection(ctx, conn, r.redisURL)
	if err != nil {
		_ = b.Close()
		return nil, nil, err
	}
	closeAll := func() { closeTenants(); _ = b.Close() }
	var ports []int32
	for _, p := range strings.Split(r.servicePorts, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("--service-ports: %q is not a port", p)
		}
		ports = append(ports, int32(n))
	}
	var cidrs []string
	for _, c := range strings.Split(r.serviceCIDRs, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cidrs = append(cidrs, c)
		}
	}
	var env []corev1.EnvVar
	if r.leaseTTL > 0 {
		env = append(env, corev1.EnvVar{Name: "PICOBOT_LEASE_TTL", Value: r.leaseTTL.String()})
	}
	if r.idleTimeout > 0 {
		env = append(env, corev1.EnvVar{Name: "PICOBOT_IDLE_TIMEOUT", Value: r.idleTimeout.String()})
	}
	env = append(env, tracingEnv(os.Environ())...)
	qenv, err := quotaDefaultsEnv(os.Getenv)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	env = append(env, qenv...)
	return &controller.RuntimeConfig{Image: r.image, BrowserImage: r.browserImage, Redis: b.Client(), Bus: b, Connection: conn, BlobURL: r.blobURL, Tenants: tenants, Env: env,
		APIReader: mgr.GetAPIReader(), ResyncBusy: 2 * time.Second, Policy: pol, MetricsPort: metricsPort, Sandbox: sandbox,
		Network: podspec.Network{SystemNamespace: r.systemNamespace, ServicePorts: ports, ServiceCIDRs: cidrs, MetricsFrom: metricsFrom}}, closeAll, nil
}

// quotaDefaultsEnv passes the platform's default quota (the chart's
// quotaDefaults) on to session pods, which check its budget before each
// model call (the gateway enforces its session and message caps, the
// operator its pod caps). A default the runtime would refuse is an error
// here, at the operator's start, rather than in every session pod.
func quotaDefaultsEnv(getenv func(string) string) ([]corev1.EnvVar, error) {
	d := getenv(quota.DefaultsEnv)
	if d == "" {
		return nil, nil
	}
	if _, err := quota.ParseDefaults(d); err != nil {
		return nil, err
	}
	return []corev1.EnvVar{{Name: quota.DefaultsEnv, Value: d}}, nil
}

// tracingEnv returns the OpenTelemetry settings (OTEL_*) of environ, sorted,
// for session pods: tracing is configured once, on the operator, and a
// session pod's turns join the traces the gateway starts (docs/tracing.md).
// OTEL_SERVICE_NAME is the operator's own: session pods call themselves
// picobot-session.
func tracingEnv(environ []string) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "OTEL_") && k != "OTEL_SERVICE_NAME" {
			env = append(env, corev1.EnvVar{Name: k, Value: v})
		}
	}
	slices.SortFunc(env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return env
}
