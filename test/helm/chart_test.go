package helm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// chartCases are the value sets every chart test renders: the defaults, and
// testdata/values/<name>.yaml (each file says what it stands for).
var chartCases = []string{"default", "external", "aws-irsa", "minimal"}

func valuesArgs(name string) []string {
	if name == "default" {
		return nil
	}
	return []string{"-f", filepath.Join(root, "test", "helm", "testdata", "values", name+".yaml")}
}

// renderChart runs helm template for a case, with extra flags.
func renderChart(name string, extra ...string) (string, error) {
	args := append([]string{"template", releaseName, chartDir, "--namespace", releaseNamespace}, valuesArgs(name)...)
	out, stderr, err := helm(append(args, extra...)...)
	if err != nil {
		return "", fmt.Errorf("helm template (%s): %w: %s", name, err, stderr)
	}
	return out, nil
}

func mustRender(t *testing.T, name string, extra ...string) string {
	t.Helper()
	out, err := renderChart(name, extra...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return out
}

// objects decodes a multi-document YAML stream.
func objects(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), "rendered output is not valid YAML")
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestLint(t *testing.T) {
	for _, name := range chartCases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir, "--namespace", releaseNamespace}, valuesArgs(name)...)
			out, stderr, err := helm(args...)
			g := NewWithT(t)
			g.Expect(err).NotTo(HaveOccurred(), out+stderr)
			g.Expect(out).To(ContainSubstring("1 chart(s) linted, 0 chart(s) failed"))
			g.Expect(out).NotTo(ContainSubstring("[WARNING]"))
		})
	}
}

// generatedSecret matches the passwords and keys the chart generates for the
// bundled servers (randAlphaNum 40), which differ on every render.
var generatedSecret = regexp.MustCompile(`\b[A-Za-z0-9]{40}\b`)

// normalize replaces each generated secret by a placeholder numbered in order
// of first appearance, so a snapshot still shows which values are the same.
func normalize(s string) string {
	seen := map[string]string{}
	return generatedSecret.ReplaceAllStringFunc(s, func(v string) string {
		if p, ok := seen[v]; ok {
			return p
		}
		p := fmt.Sprintf("<generated-%d>", len(seen)+1)
		seen[v] = p
		return p
	})
}

// TestRenderGolden compares helm template's output with the snapshots in
// testdata/golden (-update rewrites them).
func TestRenderGolden(t *testing.T) {
	for _, name := range chartCases {
		t.Run(name, func(t *testing.T) {
			got := normalize(mustRender(t, name))
			path := filepath.Join(root, "test", "helm", "testdata", "golden", name+".yaml")
			if *update {
				NewWithT(t).Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
				NewWithT(t).Expect(os.WriteFile(path, []byte(got), 0o644)).To(Succeed())
				return
			}
			want, err := os.ReadFile(path)
			NewWithT(t).Expect(err).NotTo(HaveOccurred(), "no snapshot: run go test ./test/helm/ -run TestRenderGolden -update")
			if d := firstDifference(string(want), got); d != "" {
				t.Errorf("rendered %s differs from %s (run with -update if the change is intended):\n%s", name, path, d)
			}
		})
	}
}

// firstDifference shows the first differing line of two texts with context,
// or "" when they are equal.
func firstDifference(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	var b strings.Builder
	for j := max(0, i-3); j < i; j++ {
		fmt.Fprintf(&b, "  %4d   %s\n", j+1, w[j])
	}
	for j := i; j < min(len(w), i+3); j++ {
		fmt.Fprintf(&b, "- %4d   %s\n", j+1, w[j])
	}
	for j := i; j < min(len(g), i+3); j++ {
		fmt.Fprintf(&b, "+ %4d   %s\n", j+1, g[j])
	}
	return b.String()
}

// TestSchemaRejectsInvalidValues: wrong values fail the install with a
// message naming the key and what is wrong, from the schema (one value) or
// from templates/validate.yaml (rules across values).
func TestSchemaRejectsInvalidValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"misspelt key", []string{"--set", "operator.replicas=3"},
			[]string{"at '/operator': additional properties 'replicas' not allowed"}},
		{"misspelt nested key", []string{"--set", "gateway.ingress.hosts[0]=chat.example.com"},
			[]string{"at '/gateway/ingress': additional properties 'hosts' not allowed"}},
		{"zero replicas", []string{"--set", "operator.replicaCount=0"},
			[]string{"at '/operator/replicaCount': minimum: got 0, want 1"}},
		{"replicas as a string", []string{"--set-string", "gateway.replicaCount=2"},
			[]string{"at '/gateway/replicaCount': got string, want integer"}},
		{"unknown pull policy", []string{"--set", "image.pullPolicy=Sometimes"},
			[]string{"at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"}},
		{"unknown service type", []string{"--set", "gateway.service.type=ExternalName"},
			[]string{"at '/gateway/service/type': value must be one of 'ClusterIP', 'NodePort', 'LoadBalancer'"}},
		{"bad digest", []string{"--set", "image.digest=latest"},
			[]string{"at '/image/digest': 'latest' does not match pattern"}},
		{"bad bucket name", []string{"--set", "s3.bucket=My_Bucket"},
			[]string{"at '/s3/bucket': 'My_Bucket' does not match pattern"}},
		{"bad quantity", []string{"--set", "operator.resources.requests.cpu=lots"},
			[]string{"at '/operator/resources/requests/cpu': 'lots' does not match pattern"}},
		{"flag without dashes", []string{"--set", "operator.extraArgs[0]=leader-elect"},
			[]string{"at '/operator/extraArgs/0': 'leader-elect' does not match pattern '^--"}},
		{"empty secret key", []string{"--set", "postgres.external.urlKey="},
			[]string{"at '/postgres/external/urlKey': minLength: got 0, want 1"}},
		{"bool as string", []string{"--set", "networkPolicy.enabled=yes"},
			[]string{"at '/networkPolicy/enabled': got string, want boolean"}},
		{"postgres bundled and external", []string{"--set", "postgres.external.existingSecret=pg"},
			[]string{`postgres: both the bundled server (postgres.bundled.enabled=true) and an external one (postgres.external.existingSecret="pg") are configured; set postgres.bundled.enabled=false`}},
		{"no postgres", []string{"--set", "postgres.bundled.enabled=false"},
			[]string{"postgres: no server configured; set postgres.external.existingSecret to a Secret with the keys url (app role DSN) and ownerUrl (owner DSN), or postgres.bundled.enabled=true"}},
		{"no redis", []string{"--set", "redis.bundled.enabled=false"},
			[]string{"redis: no server configured; set redis.external.existingSecret"}},
		{"redis bundled and external", []string{"--set", "redis.external.existingSecret=r"},
			[]string{"redis: both the bundled server"}},
		{"s3 bundled and external", []string{"--set", "s3.external.endpoint=http://minio:9000"},
			[]string{"s3: both the bundled server (s3.bundled.enabled=true) and external settings"}},
		{"superuser app role", []string{"--set", "postgres.appRole=postgres"},
			[]string{`postgres.appRole must not be "postgres": the runtime refuses superusers`}},
		{"service account to reuse without a name", []string{"--set", "gateway.serviceAccount.create=false"},
			[]string{"gateway.serviceAccount.name is required when gateway.serviceAccount.create is false"}},
		{"session metrics port out of range", []string{"--set", "operator.sessionMetricsPort=70000"},
			[]string{"at '/operator/sessionMetricsPort': maximum: got 70,000, want 65,535"}},
		{"alert ratio above one", []string{"--set-json", "monitoring.prometheusRule.turnErrorRatio=1.5"},
			[]string{"at '/monitoring/prometheusRule/turnErrorRatio': maximum: got 1.5, want 1"}},
		{"alert threshold not a number", []string{"--set", "monitoring.prometheusRule.turnLatencyP99Seconds=2m"},
			[]string{"at '/monitoring/prometheusRule/turnLatencyP99Seconds': '2m' does not match pattern"}},
		{"misspelt monitoring key", []string{"--set", "monitoring.gateway.serviceMonitors=true"},
			[]string{"at '/monitoring/gateway': additional properties 'serviceMonitors' not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := renderChart("default", tt.args...)
			g.Expect(err).To(HaveOccurred(), "accepted:\n%s", out)
			for _, w := range tt.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			// One line per problem, not a stack of template internals.
			g.Expect(err.Error()).NotTo(ContainSubstring("goroutine"))
		})
	}
}

// TestConnectionSecretsAreRequiredReferences: every connection setting that
// is a secret comes from a secretKeyRef that is not optional, so a missing
// existingSecret stops the pod in CreateContainerConfigError naming the
// Secret (rather than a crash loop on an empty URL); and no DSN or key is
// ever rendered into a pod spec.
func TestConnectionSecretsAreRequiredReferences(t *testing.T) {
	g := NewWithT(t)
	objs := objects(t, mustRender(t, "external"))
	want := map[string][2]string{
		"PICOBOT_POSTGRES_URL":       {"picobot-postgres", "app-dsn"},
		"PICOBOT_POSTGRES_OWNER_URL": {"picobot-postgres", "owner-dsn"},
		"PICOBOT_REDIS_URL":          {"picobot-redis", "url"},
		"AWS_ACCESS_KEY_ID":          {"picobot-s3", "accessKeyId"},
		"AWS_SECRET_ACCESS_KEY":      {"picobot-s3", "secretAccessKey"},
		// Generated by the chart: the external values name no key Secret.
		"PICOBOT_TENANT_CREDENTIALS_KEY": {"picobot-tenant-credentials", "key"},
	}
	seen := map[string]int{}
	for _, o := range objs {
		for _, c := range podContainers(t, o) {
			for _, e := range c.env {
				ref, isRef, _ := unstructured.NestedMap(e, "valueFrom", "secretKeyRef")
				name, _, _ := unstructured.NestedString(e, "name")
				w, secret := want[name]
				if !secret {
					continue
				}
				g.Expect(isRef).To(BeTrue(), "%s of %s/%s is not from a Secret", name, o.GetKind(), o.GetName())
				g.Expect(ref).To(Equal(map[string]any{"name": w[0], "key": w[1]}), "%s of %s/%s (optional must stay unset)", name, o.GetKind(), o.GetName())
				seen[name]++
			}
		}
	}
	// The operator and gateway get the runtime's settings; the migration Job
	// gets the owner DSN (and the S3 keys, to create the bucket), and the
	// operator the owner DSN and the key it provisions tenant credentials
	// with. The gateway gets neither.
	g.Expect(seen).To(Equal(map[string]int{"PICOBOT_POSTGRES_URL": 2, "PICOBOT_REDIS_URL": 2,
		"AWS_ACCESS_KEY_ID": 3, "AWS_SECRET_ACCESS_KEY": 3, "PICOBOT_POSTGRES_OWNER_URL": 2, "PICOBOT_TENANT_CREDENTIALS_KEY": 1}))
}

// TestBundledSecretHasEveryReferencedKey: with the bundled servers, every
// Secret key a pod reads (env or volume) exists in the generated Secret, and
// the generated values stay the same within one render.
func TestBundledSecretHasEveryReferencedKey(t *testing.T) {
	g := NewWithT(t)
	objs := objects(t, mustRender(t, "default"))
	secret := find(objs, "Secret", "picobot-bundled-credentials")
	g.Expect(secret).NotTo(BeNil())
	data, _, _ := unstructured.NestedStringMap(secret.Object, "stringData")
	// The operator's key of tenant passwords is a Secret of its own.
	keySecret := find(objs, "Secret", "picobot-tenant-credentials")
	g.Expect(keySecret).NotTo(BeNil())
	key, _, _ := unstructured.NestedString(keySecret.Object, "stringData", "key")
	g.Expect(len(key)).To(BeNumerically(">=", 32))
	g.Expect(keySecret.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
	refs := 0
	for _, o := range objs {
		for _, c := range podContainers(t, o) {
			for _, e := range c.env {
				if ref, ok, _ := unstructured.NestedStringMap(e, "valueFrom", "secretKeyRef"); ok && ref["name"] != keySecret.GetName() {
					g.Expect(ref["name"]).To(Equal("picobot-bundled-credentials"))
					g.Expect(data).To(HaveKey(ref["key"]), "%s/%s reads a key the Secret lacks", o.GetKind(), o.GetName())
					refs++
				}
			}
		}
		vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			items, ok, _ := unstructured.NestedSlice(v.(map[string]any), "secret", "items")
			for _, it := range items {
				if ok {
					g.Expect(data).To(HaveKey(it.(map[string]any)["key"]))
					refs++
				}
			}
		}
	}
	// Operator and gateway: 4 settings each, and their migration init
	// containers 3 (owner DSN, S3 keys); the operator the owner DSN again
	// (for tenant roles); PostgreSQL: 2 passwords; Valkey and SeaweedFS:
	// their config files.
	g.Expect(refs).To(Equal(19))
	pw := data["postgres-app-password"]
	g.Expect(pw).To(HaveLen(40))
	g.Expect(data["postgres-app-url"]).To(Equal("postgres://picobot_app:" + pw + "@picobot-postgres.picobot-system.svc:5432/picobot?sslmode=disable"))
	g.Expect(data["valkey.conf"]).To(HavePrefix("requirepass " + data["redis-password"] + "\n"))
	g.Expect(data["s3.json"]).To(ContainSubstring(`"accessKey": "` + data["s3-access-key-id"] + `"`))
	g.Expect(secret.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
}

// TestOptionsRenderWhatTheySay checks the effect of the options the golden
// files cover, by meaning rather than by text.
func TestOptionsRenderWhatTheySay(t *testing.T) {
	g := NewWithT(t)
	def := objects(t, mustRender(t, "default"))
	ext := objects(t, mustRender(t, "external"))
	aws := objects(t, mustRender(t, "aws-irsa"))
	minimal := objects(t, mustRender(t, "minimal"))

	kinds := func(objs []*unstructured.Unstructured) map[string]int {
		m := map[string]int{}
		for _, o := range objs {
			m[o.GetKind()]++
		}
		return m
	}
	// ClusterRoles: the operator's, its metrics endpoint's (token and access
	// reviews), the gateway's two (reading Agents; reviewing session pods'
	// blob tokens), the tenant roles picobot-edit and picobot-view, and
	// picobot-metrics-reader for Prometheus. Roles in the release namespace: the
	// operator's leader election and publishing for the gateway, the
	// gateway's reading of what is published. External adds the monitoring
	// objects: the operator's and the gateway's ServiceMonitors, the session
	// PodMonitor, the alerts and two dashboard ConfigMaps.
	g.Expect(kinds(def)).To(Equal(map[string]int{"CustomResourceDefinition": 4, "ClusterRole": 7, "ClusterRoleBinding": 4,
		"Role": 3, "RoleBinding": 3, "ServiceAccount": 2, "Deployment": 2, "Service": 5, "PodDisruptionBudget": 2,
		"NetworkPolicy": 5, "Secret": 2, "ConfigMap": 1, "StatefulSet": 3}))
	g.Expect(kinds(ext)).To(Equal(map[string]int{"CustomResourceDefinition": 4, "ClusterRole": 7, "ClusterRoleBinding": 4,
		"Role": 3, "RoleBinding": 3, "ServiceAccount": 2, "Deployment": 2, "Service": 2, "PodDisruptionBudget": 2,
		"NetworkPolicy": 3, "Job": 1, "Ingress": 1, "ServiceMonitor": 2, "PodMonitor": 1, "PrometheusRule": 1, "ConfigMap": 2, "Secret": 1}))
	g.Expect(kinds(aws)).To(Equal(map[string]int{"ClusterRole": 7, "ClusterRoleBinding": 4,
		"Role": 3, "RoleBinding": 3, "Deployment": 2, "Service": 2, "Job": 1}))

	// CRDs: kept on uninstall by default, not with crds.keep=false.
	for _, o := range def {
		if o.GetKind() == "CustomResourceDefinition" {
			g.Expect(o.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
		}
	}
	for _, o := range minimal {
		if o.GetKind() == "CustomResourceDefinition" {
			g.Expect(o.GetAnnotations()).NotTo(HaveKey("helm.sh/resource-policy"))
		}
	}

	// The operator runs exactly as the binaries' contract says.
	op := find(ext, "Deployment", "picobot-operator")
	g.Expect(op).NotTo(BeNil())
	c := podContainers(t, op)[0]
	img := "registry.example.com/picobot/picobot@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	g.Expect(c.image).To(Equal(img))
	g.Expect(c.command).To(Equal([]string{"/operator"}))
	g.Expect(c.args).To(Equal([]string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443",
		"--runtime-image=" + img, "--browser-image=registry.example.com/picobot/picobot-browser:0.1.0-rc.1",
		"--zap-log-level=debug",
		// Session pods reach S3 through the gateway's blob grant service.
		"--blob-url=http://picobot-gateway." + releaseNamespace + ".svc:8090",
		// Session pods' metrics, scrapable from networkPolicy.metricsFrom.
		"--session-metrics-port=9090",
		`--session-metrics-from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		// The runtime policy's defaults.
		"--default-requests=cpu=100m,memory=256Mi", "--default-limits=memory=1Gi", "--max-resources=cpu=2,memory=4Gi",
		"--max-warm-pods-per-agent=5", "--max-sessions-per-agent=100", "--max-warm-pods-per-namespace=20", "--max-sessions-per-namespace=500", "--sandbox-placement=container",
		// The values' default tenant caps.
		"--default-max-session-pods=50", "--default-max-warm-pods=10", "--default-max-browser-pods=5", "--default-max-cronjobs=100",
		"--service-cidrs=10.20.0.0/16", "--concurrency=8"}))
	replicas, _, _ := unstructured.NestedFieldNoCopy(op.Object, "spec", "replicas")
	g.Expect(replicas).To(BeEquivalentTo(3))

	gw := find(def, "Deployment", "picobot-gateway")
	gc := podContainers(t, gw)
	g.Expect(gc).To(HaveLen(2), "the migration init container and the gateway")
	g.Expect(gc[0].name).To(Equal("migrate"))
	g.Expect(gc[0].args).To(Equal([]string{"migrate", "--app-role=picobot_app"}))
	var migrateEnv []string
	for _, e := range gc[0].env {
		migrateEnv = append(migrateEnv, e["name"].(string))
	}
	g.Expect(migrateEnv).To(Equal([]string{"PICOBOT_POSTGRES_OWNER_URL", "PICOBOT_S3_ENDPOINT", "PICOBOT_S3_BUCKET",
		"PICOBOT_S3_REGION", "PICOBOT_S3_PATH_STYLE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}), "the migration also creates the bucket")
	g.Expect(gc[1].command).To(Equal([]string{"/picobot"}))
	g.Expect(gc[1].args).To(Equal([]string{"gateway", "--addr=:8080", "--blob-addr=:8090", "--metrics-addr=:9090", "--namespace=picobot-system"}), "API keys are published in the release namespace")
	g.Expect(gc[1].image).To(Equal("ghcr.io/picobot/picobot:0.1.0"), "the tag defaults to appVersion")

	// With an external database the migration is a hook before install and upgrade.
	job := find(ext, "Job", "picobot-migrate")
	g.Expect(job.GetAnnotations()).To(HaveKeyWithValue("helm.sh/hook", "pre-install,pre-upgrade"))
	g.Expect(podContainers(t, job)[0].args).To(Equal([]string{"migrate", "--app-role=picobot_rt"}))
	g.Expect(podContainers(t, find(ext, "Deployment", "picobot-gateway"))).To(HaveLen(1), "no init container")
	g.Expect(find(minimal, "Job", "acme-bot-migrate")).To(BeNil())
	g.Expect(podContainers(t, find(minimal, "Deployment", "acme-bot-gateway"))).To(HaveLen(1), "migrations.enabled=false")

	// S3 through IRSA: no endpoint and no static keys, so the SDK's default chain.
	env := map[string]bool{}
	for _, e := range podContainers(t, find(aws, "Deployment", "picobot-gateway"))[0].env {
		env[e["name"].(string)] = true
	}
	g.Expect(env).To(HaveKey("PICOBOT_S3_BUCKET"))
	g.Expect(env).NotTo(HaveKey("PICOBOT_S3_ENDPOINT"))
	g.Expect(env).NotTo(HaveKey("AWS_ACCESS_KEY_ID"))
	sa, _, _ := unstructured.NestedString(find(aws, "Deployment", "picobot-operator").Object, "spec", "template", "spec", "serviceAccountName")
	g.Expect(sa).To(Equal("picobot-operator-irsa"))

	// Names follow fullnameOverride; labels follow nameOverride.
	st := find(minimal, "StatefulSet", "acme-bot-postgres")
	g.Expect(st).NotTo(BeNil())
	g.Expect(st.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/name", "assistant"))
	sc, _, _ := unstructured.NestedSlice(st.Object, "spec", "volumeClaimTemplates")
	g.Expect(sc[0]).To(HaveKeyWithValue("spec", HaveKeyWithValue("storageClassName", "local-path")))

	// The gateway's public URL follows the Ingress unless set.
	publicURL := func(objs []*unstructured.Unstructured, deployment string) string {
		for _, e := range podContainers(t, find(objs, "Deployment", deployment))[0].env {
			if e["name"] == "PICOBOT_PUBLIC_URL" {
				return e["value"].(string)
			}
		}
		return ""
	}
	g.Expect(publicURL(ext, "picobot-gateway")).To(Equal("https://chat.example.com"))
	g.Expect(publicURL(aws, "picobot-gateway")).To(BeEmpty())
	set := objects(t, mustRender(t, "default", "--set", "gateway.publicURL=https://bot.example.com/"))
	g.Expect(publicURL(set, "picobot-gateway")).To(BeEmpty(), "index 0 is the migration init container")
	g.Expect(podContainers(t, find(set, "Deployment", "picobot-gateway"))[1].env[0]).To(Equal(map[string]any{
		"name": "PICOBOT_PUBLIC_URL", "value": "https://bot.example.com"}))

	// Ingress with TLS, routing everything to the gateway.
	ing := find(ext, "Ingress", "picobot-gateway")
	host, _, _ := unstructured.NestedSlice(ing.Object, "spec", "tls")
	g.Expect(host).To(HaveLen(1))
	g.Expect(ing.GetAnnotations()).To(HaveKeyWithValue("nginx.ingress.kubernetes.io/proxy-read-timeout", "3600"))

	// Every object carries the common labels.
	for _, o := range ext {
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("team", "platform"), "%s/%s", o.GetKind(), o.GetName())
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/part-of", "picobot"), "%s/%s", o.GetKind(), o.GetName())
	}
}

// TestPodsAreHardened: every pod of the chart runs non-root with the
// runtime's seccomp profile, and every container drops all capabilities, has
// a read-only root and cannot escalate privileges.
func TestPodsAreHardened(t *testing.T) {
	for _, name := range chartCases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			pods := 0
			for _, o := range objects(t, mustRender(t, name)) {
				spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
				if !ok {
					continue
				}
				pods++
				what := o.GetKind() + "/" + o.GetName()
				g.Expect(spec).To(HaveKeyWithValue("securityContext", And(
					HaveKeyWithValue("runAsNonRoot", true),
					HaveKeyWithValue("seccompProfile", HaveKeyWithValue("type", "RuntimeDefault")))), what)
				for _, c := range podContainers(t, o) {
					g.Expect(c.securityContext).To(And(
						HaveKeyWithValue("allowPrivilegeEscalation", false),
						HaveKeyWithValue("readOnlyRootFilesystem", true),
						HaveKeyWithValue("capabilities", HaveKeyWithValue("drop", ConsistOf("ALL")))), what+" "+c.name)
					g.Expect(c.resources).To(HaveKey("requests"), what+" "+c.name)
				}
			}
			g.Expect(pods).To(BeNumerically(">=", 2))
		})
	}
}

// container is what the tests read of a rendered container.
type container struct {
	name, image     string
	command, args   []string
	env             []map[string]any
	securityContext map[string]any
	resources       map[string]any
}

// podContainers returns the init containers and containers of a workload
// (Deployment, StatefulSet, Job), in that order; none for other kinds.
func podContainers(t *testing.T, o *unstructured.Unstructured) []container {
	t.Helper()
	var out []container
	for _, field := range []string{"initContainers", "containers"} {
		list, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		for _, item := range list {
			m := item.(map[string]any)
			c := container{}
			c.name, _, _ = unstructured.NestedString(m, "name")
			c.image, _, _ = unstructured.NestedString(m, "image")
			c.command, _, _ = unstructured.NestedStringSlice(m, "command")
			c.args, _, _ = unstructured.NestedStringSlice(m, "args")
			c.securityContext, _, _ = unstructured.NestedMap(m, "securityContext")
			c.resources, _, _ = unstructured.NestedMap(m, "resources")
			env, _, _ := unstructured.NestedSlice(m, "env")
			for _, e := range env {
				c.env = append(c.env, e.(map[string]any))
			}
			out = append(out, c)
		}
	}
	return out
}

// TestChartManifestsAreGenerated: the chart's CRDs and operator RBAC rules
// are what hack/chart-manifests.sh makes of config/ now (make manifests runs
// it; make verify fails when they are stale).
func TestChartManifestsAreGenerated(t *testing.T) {
	g := NewWithT(t)
	tmp := t.TempDir()
	_, stderr, err := execute("", filepath.Join(root, "hack", "chart-manifests.sh"), tmp)
	g.Expect(err).NotTo(HaveOccurred(), stderr)
	var generated []string
	err = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(tmp, p)
		if err != nil {
			return err
		}
		generated = append(generated, rel)
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(chartDir, rel))
		if err != nil {
			return fmt.Errorf("%s is missing from the chart (run make manifests): %w", rel, err)
		}
		if !bytes.Equal(want, got) {
			return fmt.Errorf("charts/picobot/%s is stale (run make manifests):\n%s", rel, firstDifference(string(want), string(got)))
		}
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(generated).To(ConsistOf(
		filepath.Join("templates", "crds", "agents.picobot.io_agents.yaml"),
		filepath.Join("templates", "crds", "agents.picobot.io_browserprofiles.yaml"),
		filepath.Join("templates", "crds", "agents.picobot.io_cronjobs.yaml"),
		filepath.Join("templates", "crds", "agents.picobot.io_tenantquotas.yaml"),
		filepath.Join("templates", "operator", "_rules.tpl")))
	// No CRD in the chart that config/ no longer has.
	entries, err := os.ReadDir(filepath.Join(chartDir, "templates", "crds"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(4))
}
