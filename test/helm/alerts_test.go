package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/picobot/picobot/test/services"
)

// The operator's series as the chart's ServiceMonitor delivers them: the job
// is its metrics Service, namespace the release's, and the series' own
// namespace label exported_namespace.
const (
	opLabels    = `job="picobot-operator-metrics",namespace="picobot-system"`
	otherLabels = `job="another-operator",namespace="elsewhere"`
)

// promSeries is an input series of a promtool test: a selector and its
// values in promtool's expanding notation ("0+6x40": 0, 6, ..., 240, one a
// minute).
type promSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type promAlert struct {
	Labels      map[string]string `json:"exp_labels"`
	Annotations map[string]string `json:"exp_annotations"`
}

type promAlertTest struct {
	EvalTime  string      `json:"eval_time"`
	Alertname string      `json:"alertname"`
	Alerts    []promAlert `json:"exp_alerts"`
}

type promTestGroup struct {
	Name     string          `json:"name"`
	Interval string          `json:"interval"`
	Series   []promSeries    `json:"input_series"`
	Alerts   []promAlertTest `json:"alert_rule_test"`
}

type promTestFile struct {
	RuleFiles          []string        `json:"rule_files"`
	EvaluationInterval string          `json:"evaluation_interval"`
	Tests              []promTestGroup `json:"tests"`
}

// alertCase is one alert's promtool test: series of which some are bad (the
// alert fires for them) and some good (it stays silent), the alerts
// expected at fireAt, and none at quietAt (still pending: its for has not
// passed).
type alertCase struct {
	alert  string
	series []promSeries
	// fireAt is when the alert fires for the bad series, with these labels
	// besides the rule's (severity) and the values of the annotations'
	// template expressions.
	fireAt  string
	labels  map[string]string
	values  map[string]string
	quietAt string
}

// alertCases covers every alert of the chart's PrometheusRule with its
// default thresholds.
func alertCases() []alertCase {
	turns := func(tenant, agent, outcome, values string) promSeries {
		return promSeries{`picobot_turns_total{tenant="` + tenant + `",agent="` + agent + `",outcome="` + outcome + `"}`, values}
	}
	// buckets is a classic histogram whose observations (one a minute) all
	// fall in the bucket ending at bound, the one before ending at below.
	buckets := func(name, labels, below, bound string) []promSeries {
		out := []promSeries{}
		for _, le := range []string{below, bound, "+Inf"} {
			v := "0+1x60"
			if le == below {
				v = "0x60"
			}
			out = append(out, promSeries{name + "_bucket{" + labels + `,le="` + le + `"}`, v})
		}
		return out
	}
	turnBuckets := func(agent, phase, below, bound string) []promSeries {
		return buckets("picobot_turn_duration_seconds", `tenant="t1",agent="`+agent+`",phase="`+phase+`"`, below, bound)
	}
	join := func(lists ...[]promSeries) []promSeries {
		var out []promSeries
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	return []alertCase{{
		alert: "PicoBotTurnErrorRate",
		series: []promSeries{
			// Agent a: half its turns fail.
			turns("t1", "a", "ok", "0+6x40"), turns("t1", "a", "internal", "0+6x40"),
			// Agent b: 1 in 21 fails; /stop is no failure.
			turns("t1", "b", "ok", "0+10x40"), turns("t1", "b", "stopped", "0+10x40"), turns("t1", "b", "model_rejected", "0+1x40"),
		},
		fireAt: "30m", quietAt: "5m",
		labels: map[string]string{"tenant": "t1", "agent": "a"},
		values: map[string]string{"{{ $value | humanizePercentage }}": "50%"},
	}, {
		alert: "PicoBotTurnLatencyHigh",
		series: join(
			// Agent a's turns take 2 to 5 minutes: p99 298.2 s.
			turnBuckets("a", "total", "120", "300"),
			// Agent b's take under a second; agent c's model calls are
			// slow, but that is not the turns' total.
			turnBuckets("b", "total", "0.5", "1"),
			turnBuckets("c", "model", "120", "300"), turnBuckets("c", "total", "0.5", "1"),
		),
		fireAt: "30m", quietAt: "10m",
		labels: map[string]string{"tenant": "t1", "agent": "a"},
		values: map[string]string{"{{ $value | humanizeDuration }}": "4m 58s"},
	}, {
		alert: "PicoBotQueueWaitHigh",
		series: join(
			// Agent a's messages wait 30 s to a minute: p99 59.7 s.
			turnBuckets("a", "queue", "30", "60"),
			turnBuckets("b", "queue", "0.5", "1"),
			// Agent c's turns are long, but its messages are taken at once.
			turnBuckets("c", "total", "30", "60"), turnBuckets("c", "queue", "0.5", "1"),
		),
		fireAt: "30m", quietAt: "5m",
		labels: map[string]string{"tenant": "t1", "agent": "a"},
		values: map[string]string{"{{ $value | humanizeDuration }}": "59.7s"},
	}, {
		alert: "PicoBotCronFireLagHigh",
		series: join(
			// t1's runs start 1 to 5 minutes late: p99 297.6 s.
			buckets("picobot_cron_fire_lag_seconds", opLabels+`,exported_namespace="t1"`, "60", "300"),
			buckets("picobot_cron_fire_lag_seconds", opLabels+`,exported_namespace="t2"`, "0.5", "1"),
			// Another operator's series of the same name are not ours.
			buckets("picobot_cron_fire_lag_seconds", otherLabels+`,exported_namespace="t3"`, "600", "1800"),
		),
		fireAt: "50m", quietAt: "10m",
		labels: map[string]string{"exported_namespace": "t1"},
		values: map[string]string{"{{ $value | humanizeDuration }}": "4m 57s"},
	}, {
		alert: "PicoBotBusBacklogGrowing",
		series: []promSeries{
			// t1's chat streams: 100 entries and 5 more a minute.
			{`picobot_bus_stream_entries{` + opLabels + `,exported_namespace="t1",stream="chat",group="runtime",state="pending"}`, "60+5x60"},
			{`picobot_bus_stream_entries{` + opLabels + `,exported_namespace="t1",stream="chat",group="none",state="unread"}`, "40x60"},
			// t1's outbound: large but not growing; t2's chats: growing
			// but small; another operator's: not ours.
			{`picobot_bus_stream_entries{` + opLabels + `,exported_namespace="t1",stream="outbound",group="gateway",state="unread"}`, "500x60"},
			{`picobot_bus_stream_entries{` + opLabels + `,exported_namespace="t2",stream="chat",group="runtime",state="pending"}`, "0+1x60"},
			{`picobot_bus_stream_entries{` + otherLabels + `,exported_namespace="t3",stream="chat",group="runtime",state="pending"}`, "200+5x60"},
		},
		fireAt: "30m", quietAt: "10m",
		labels: map[string]string{"exported_namespace": "t1", "stream": "chat"},
		values: map[string]string{"{{ $value }}": "250", "{{ $labels.stream }}": "chat"},
	}, {
		alert: "PicoBotWarmPoolExhausted",
		series: []promSeries{
			// Agent a asks for 2 warm pods and has none.
			{`picobot_pool_warm_target{` + opLabels + `,exported_namespace="t1",agent="a"}`, "2x40"},
			{`picobot_pool_pods{` + opLabels + `,exported_namespace="t1",agent="a",state="warm"}`, "0x40"},
			{`picobot_pool_pods{` + opLabels + `,exported_namespace="t1",agent="a",state="active"}`, "3x40"},
			// Agent b has one of its 2; agent c asks for none.
			{`picobot_pool_warm_target{` + opLabels + `,exported_namespace="t1",agent="b"}`, "2x40"},
			{`picobot_pool_pods{` + opLabels + `,exported_namespace="t1",agent="b",state="warm"}`, "1x40"},
			{`picobot_pool_warm_target{` + opLabels + `,exported_namespace="t1",agent="c"}`, "0x40"},
			{`picobot_pool_pods{` + opLabels + `,exported_namespace="t1",agent="c",state="warm"}`, "0x40"},
			// Another operator's Agent of that name has none warm: its
			// warm pods are not agent a's.
			{`picobot_pool_warm_target{` + otherLabels + `,exported_namespace="t1",agent="b"}`, "2x40"},
			{`picobot_pool_pods{` + otherLabels + `,exported_namespace="t1",agent="a",state="warm"}`, "1x40"},
		},
		fireAt: "30m", quietAt: "5m",
		labels: map[string]string{"exported_namespace": "t1", "agent": "a"},
		values: map[string]string{"{{ $value }}": "2"},
	}, {
		alert: "PicoBotOperatorReconcileErrors",
		series: []promSeries{
			// The agent controller: 2 of 10 reconciles a minute fail.
			{`controller_runtime_reconcile_total{` + opLabels + `,controller="agent",result="success"}`, "0+8x60"},
			{`controller_runtime_reconcile_total{` + opLabels + `,controller="agent",result="error"}`, "0+2x60"},
			{`controller_runtime_reconcile_errors_total{` + opLabels + `,controller="agent"}`, "0+2x60"},
			// The cronjob controller: 1 in 100.
			{`controller_runtime_reconcile_total{` + opLabels + `,controller="cronjob",result="success"}`, "0+99x60"},
			{`controller_runtime_reconcile_total{` + opLabels + `,controller="cronjob",result="error"}`, "0+1x60"},
			{`controller_runtime_reconcile_errors_total{` + opLabels + `,controller="cronjob"}`, "0+1x60"},
			// Another operator's controller fails half the time.
			{`controller_runtime_reconcile_total{` + otherLabels + `,controller="widget",result="error"}`, "0+5x60"},
			{`controller_runtime_reconcile_total{` + otherLabels + `,controller="widget",result="success"}`, "0+5x60"},
			{`controller_runtime_reconcile_errors_total{` + otherLabels + `,controller="widget"}`, "0+5x60"},
		},
		fireAt: "30m", quietAt: "10m",
		labels: map[string]string{"controller": "agent"},
		values: map[string]string{"{{ $value | humanizePercentage }}": "20%"},
	}}
}

// templateExpr finds the template expressions left in an annotation.
var templateExpr = regexp.MustCompile(`{{[^}]*}}`)

// promtoolTests writes the rule file of groups and the promtool test file
// of cases into dir and returns the test file's path. rules are the
// PrometheusRule's rules by alert name, whose annotations the expected
// alerts carry with cases' values in place of their template expressions.
func promtoolTests(t *testing.T, dir string, groups []any, cases []alertCase) string {
	t.Helper()
	g := NewWithT(t)
	rules := map[string]map[string]any{}
	for _, grp := range groups {
		for _, r := range grp.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			rules[r["alert"].(string)] = r
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o600)).To(Succeed())
	file := promTestFile{RuleFiles: []string{"rules.yaml"}, EvaluationInterval: "1m"}
	for _, c := range cases {
		rule := rules[c.alert]
		g.Expect(rule).NotTo(BeNil(), "the chart has no alert %s", c.alert)
		labels := map[string]string{}
		for k, v := range rule["labels"].(map[string]any) {
			labels[k] = v.(string)
		}
		for k, v := range c.labels {
			labels[k] = v
		}
		values := map[string]string{}
		for k, v := range c.values {
			values[k] = v
		}
		for k, v := range c.labels {
			values["{{ $labels."+k+" }}"] = v
		}
		annotations := map[string]string{}
		for k, v := range rule["annotations"].(map[string]any) {
			text := v.(string)
			for expr, value := range values {
				text = strings.ReplaceAll(text, expr, value)
			}
			g.Expect(templateExpr.FindAllString(text, -1)).To(BeEmpty(), "%s: annotation %s has expressions the test gives no value", c.alert, k)
			annotations[k] = text
		}
		file.Tests = append(file.Tests, promTestGroup{Name: c.alert, Interval: "1m", Series: c.series, Alerts: []promAlertTest{
			{EvalTime: c.quietAt, Alertname: c.alert, Alerts: []promAlert{}},
			{EvalTime: c.fireAt, Alertname: c.alert, Alerts: []promAlert{{Labels: labels, Annotations: annotations}}},
		}})
	}
	b, err = yaml.Marshal(file)
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(dir, "tests.yaml")
	g.Expect(os.WriteFile(path, b, 0o600)).To(Succeed())
	return path
}

// promtool runs promtool in dir and returns its combined output.
func promtool(bin, dir string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAlertRulesFireOnBadSeries evaluates the chart's alerts with
// Prometheus's own rule engine (promtool test rules, built from the same
// module as the e2e tests' Prometheus): each fires, with its labels and
// its annotations rendered, on series that should page, only after its
// for, and stays silent on series that should not (other agents, other
// phases, another operator's job). A rule file whose expressions are
// changed fails those tests.
func TestAlertRulesFireOnBadSeries(t *testing.T) {
	g := NewWithT(t)
	bin := services.PromtoolBinary(t)
	rule := find(objects(t, mustRender(t, "default", "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.force=true")),
		"PrometheusRule", "picobot-alerts")
	g.Expect(rule).NotTo(BeNil())
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	cases := alertCases()
	var alerts []string
	for _, grp := range groups {
		for _, r := range grp.(map[string]any)["rules"].([]any) {
			alerts = append(alerts, r.(map[string]any)["alert"].(string))
		}
	}
	var tested []string
	for _, c := range cases {
		tested = append(tested, c.alert)
	}
	g.Expect(tested).To(ConsistOf(alerts), "every alert of the chart has a case")

	dir := t.TempDir()
	tests := promtoolTests(t, dir, groups, cases)
	out, err := promtool(bin, dir, "check", "rules", "rules.yaml")
	g.Expect(err).NotTo(HaveOccurred(), "promtool check rules:\n%s", out)
	g.Expect(out).To(ContainSubstring("SUCCESS: %d rules found", len(alerts)))
	out, err = promtool(bin, dir, "test", "rules", tests)
	g.Expect(err).NotTo(HaveOccurred(), "promtool test rules:\n%s", out)
	g.Expect(out).To(ContainSubstring("SUCCESS"))
	t.Logf("promtool test rules:\n%s", out)

	// The same tests fail on rules that do not say what the chart's do:
	// each alert's threshold out of reach.
	broken := t.TempDir()
	for _, grp := range groups {
		for _, r := range grp.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			r["expr"] = "(" + r["expr"].(string) + ") > 1e12"
		}
	}
	tests = promtoolTests(t, broken, groups, cases)
	out, err = promtool(bin, broken, "test", "rules", tests)
	g.Expect(err).To(HaveOccurred(), "promtool test rules passed broken rules:\n%s", out)
	for _, a := range alerts {
		g.Expect(out).To(ContainSubstring("alertname: "+a+","), "the broken %s fails its test", a)
	}
}
