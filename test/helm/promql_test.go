package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// promql parses as Prometheus does (no experimental features).
var promql = parser.NewParser(parser.Options{})

// documentedPicoBotMetrics are the picobot_* metrics the docs' tables list,
// the names every dashboard and alert must keep to.
func documentedPicoBotMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, m := range regexp.MustCompile("(?m)^\\| `(picobot_[a-z_]+)` \\|").FindAllSubmatch(b, -1) {
		out[string(m[1])] = true
	}
	NewWithT(t).Expect(out).To(HaveKey("picobot_turns_total"), "the table of docs/metrics.md")
	return out
}

// servedByControllerRuntime says whether controller-runtime registers a
// metric of this name in the registry the operator serves: registering
// another collector under that name with a different help is refused then,
// and only then.
func servedByControllerRuntime(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of " + name})
	if err := ctrlmetrics.Registry.Register(probe); err != nil {
		return true
	}
	ctrlmetrics.Registry.Unregister(probe)
	return false
}

// expectKnownMetrics parses expr and checks that every metric it selects
// exists: a documented picobot_* metric or one of controller-runtime's
// (histogram series by their family name).
func expectKnownMetrics(g Gomega, documented map[string]bool, expr, where string) {
	e, err := promql.ParseExpr(expr)
	g.Expect(err).NotTo(HaveOccurred(), "%s: %s", where, expr)
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	g.Expect(names).NotTo(BeEmpty(), "%s selects no metric: %s", where, expr)
	for _, name := range names {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			family = strings.TrimSuffix(family, suffix)
		}
		if strings.HasPrefix(family, "picobot_") {
			g.Expect(documented).To(HaveKey(family), "%s: %s is not in docs/metrics.md", where, name)
			continue
		}
		g.Expect(servedByControllerRuntime(family)).To(BeTrue(), "%s: %s is neither PicoBot's nor controller-runtime's", where, name)
	}
}

// TestAlertRulesAreValidPromQL: every alert of the PrometheusRule parses as
// PromQL, selects only metrics that exist, waits a valid duration, and takes
// its thresholds from the values.
func TestAlertRulesAreValidPromQL(t *testing.T) {
	g := NewWithT(t)
	documented := documentedPicoBotMetrics(t)
	render := func(args ...string) *unstructured.Unstructured {
		base := []string{"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.force=true"}
		return find(objects(t, mustRender(t, "default", append(base, args...)...)), "PrometheusRule", "picobot-alerts")
	}
	rule := render()
	g.Expect(rule).NotTo(BeNil())
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	exprs := map[string]string{}
	for _, grp := range groups {
		for _, r := range grp.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			alert := r["alert"].(string)
			exprs[alert] = r["expr"].(string)
			expectKnownMetrics(g, documented, exprs[alert], alert)
			_, err := model.ParseDuration(r["for"].(string))
			g.Expect(err).NotTo(HaveOccurred(), alert)
			g.Expect(r["labels"]).To(Equal(map[string]any{"severity": "warning"}), alert)
			annotations := r["annotations"].(map[string]any)
			g.Expect(annotations).To(HaveKey("summary"), alert)
			g.Expect(annotations).To(HaveKey("description"), alert)
		}
	}
	g.Expect(exprs).To(HaveLen(7))
	for _, alert := range []string{"PicoBotBusBacklogGrowing", "PicoBotWarmPoolExhausted"} {
		g.Expect(exprs[alert]).To(ContainSubstring(`job="picobot-operator-metrics", namespace="picobot-system"`),
			"%s: the operator exports what it reads", alert)
	}
	g.Expect(exprs["PicoBotWarmPoolExhausted"]).To(ContainSubstring("picobot_pool_warm_target"), "compares with the Agent's warm pool size")
	g.Expect(exprs["PicoBotCronFireLagHigh"]).To(ContainSubstring(`job="picobot-operator-metrics", namespace="picobot-system"`),
		"the operator's scheduler records it")
	g.Expect(exprs["PicoBotOperatorReconcileErrors"]).To(ContainSubstring(`job="picobot-operator-metrics", namespace="picobot-system"`),
		"only this release's operator")

	// Thresholds and labels come from the values.
	rule = render("--set", "monitoring.prometheusRule.turnErrorRatio=0.25", "--set", "monitoring.prometheusRule.turnLatencyP99Seconds=42.5",
		"--set", "monitoring.prometheusRule.cronFireLagP99Seconds=300", "--set", "monitoring.prometheusRule.busBacklogEntries=250",
		"--set", "monitoring.prometheusRule.alertLabels.team=platform")
	groups, _, _ = unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, grp := range groups {
		for _, r := range grp.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			expectKnownMetrics(g, documented, r["expr"].(string), r["alert"].(string))
			g.Expect(r["labels"]).To(HaveKeyWithValue("team", "platform"))
			switch r["alert"] {
			case "PicoBotTurnErrorRate":
				g.Expect(r["expr"]).To(HaveSuffix("> 0.25"))
			case "PicoBotTurnLatencyHigh":
				g.Expect(r["expr"]).To(HaveSuffix("> 42.5"))
			case "PicoBotCronFireLagHigh":
				g.Expect(r["expr"]).To(HaveSuffix("> 300"))
			case "PicoBotBusBacklogGrowing":
				g.Expect(r["expr"]).To(ContainSubstring("> 250\nand\n"))
			}
		}
	}
}

// grafanaVariables are what Grafana puts in place of a dashboard's
// variables before it sends a query.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "2m", "$tenant", ".*", "$agent", ".*", "$job", ".*")

// labelValues is a variable's label_values(<selector>, <label>) query.
var labelValues = regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)

// TestDashboardsQueryExistingMetrics: each dashboard is a ConfigMap with the
// Grafana sidecar's label holding one JSON dashboard of a unique uid, and
// every query of its panels and variables parses as PromQL and selects only
// metrics that exist.
func TestDashboardsQueryExistingMetrics(t *testing.T) {
	g := NewWithT(t)
	documented := documentedPicoBotMetrics(t)
	g.Expect(find(objects(t, mustRender(t, "default")), "ConfigMap", "picobot-dashboard-overview")).To(BeNil(), "off by default")

	objs := objects(t, mustRender(t, "default", "--set", "monitoring.dashboards.enabled=true",
		"--set", "monitoring.dashboards.namespace=grafana", "--set", "monitoring.dashboards.annotations.grafana_folder=PicoBot"))
	uids := map[string]bool{}
	var queries int
	for _, name := range []string{"picobot-dashboard-overview", "picobot-dashboard-operator"} {
		cm := find(objs, "ConfigMap", name)
		g.Expect(cm).NotTo(BeNil(), name)
		g.Expect(cm.GetNamespace()).To(Equal("grafana"))
		g.Expect(cm.GetLabels()).To(HaveKeyWithValue("grafana_dashboard", "1"))
		g.Expect(cm.GetAnnotations()).To(Equal(map[string]string{"grafana_folder": "PicoBot"}))
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		g.Expect(data).To(HaveLen(1), name)
		var dash struct {
			UID    string `json:"uid"`
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Name  string `json:"name"`
					Type  string `json:"type"`
					Query any    `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		for _, body := range data {
			g.Expect(json.Unmarshal([]byte(body), &dash)).To(Succeed(), name)
		}
		g.Expect(dash.UID).NotTo(BeEmpty())
		g.Expect(uids).NotTo(HaveKey(dash.UID), "uids are unique")
		uids[dash.UID] = true
		for _, p := range dash.Panels {
			for _, target := range p.Targets {
				expectKnownMetrics(g, documented, grafanaVariables.Replace(target.Expr), dash.Title+": "+p.Title)
				queries++
			}
		}
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, _ := v.Query.(map[string]any)["query"].(string)
			m := labelValues.FindStringSubmatch(q)
			g.Expect(m).NotTo(BeNil(), "%s: variable %s: %q", dash.Title, v.Name, q)
			expectKnownMetrics(g, documented, grafanaVariables.Replace(m[1]), dash.Title+": variable "+v.Name)
		}
	}
	g.Expect(queries).To(BeNumerically(">", 15))
}
