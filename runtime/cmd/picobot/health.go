package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/sandbox"
	browsertool "github.com/picobot/picobot/runtime/tool/browser"
)

// errChecksFailed makes `picobot health` exit non-zero.
var errChecksFailed = errors.New("health checks failed")

// healthTimeout bounds asking a gateway for its report: the report waits for
// a real headless browser launch and the model endpoints' probes.
const healthTimeout = 2 * time.Minute

// healthCmd is `picobot health [--json]`.
func healthCmd(args []string) error {
	return runHealth(context.Background(), args, os.Getenv, os.Stdout, defaultGatewayURL)
}

// runHealth is `picobot health`; defaultURL is where `picobot serve` listens
// by default (a parameter so tests need not own that port).
func runHealth(ctx context.Context, args []string, env func(string) string, out io.Writer, defaultURL string) error {
	fs := newFlags("health", `Usage: picobot health [flags]

Shows the health report of the running gateway (--url, $PICOBOT_URL, else the local `+"`picobot serve`"+`
address): the same checks as the health tool, /health and the web UI's health page. When no gateway
answers at the default address it says so and checks the manifests folder locally instead (model keys
and endpoints, Chromium, the tool sandbox's kernel layers, the state folder). Exit code 1 when a
required check fails.
`)
	gatewayURL := fs.String("url", "", "Gateway whose report to show ($PICOBOT_URL, else "+defaultURL+" when it answers).")
	apiKey := fs.String("api-key", env("PICOBOT_API_KEY"), "API key of the gateway ($PICOBOT_API_KEY); without a valid one it shows no checks.")
	local := fs.Bool("local", false, "Check the manifests folder here without asking a gateway.")
	dir := fs.String("dir", ".", "Folder with Agent/CronJob/BrowserProfile manifests (and Secrets), for the local checks.")
	state := fs.String("state", "", "State folder (default <dir>/.picobot), for the local checks.")
	asJSON := fs.Bool("json", false, "Print the report as JSON, with where it comes from.")
	bin := fs.String("chromium", browser.DefaultBin, "Chromium executable the browser tool uses, for the local checks.")
	if err := parseFlags(fs, args, out, os.Stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := *gatewayURL != "" || env("PICOBOT_URL") != ""
	target := *gatewayURL
	if target == "" {
		target = env("PICOBOT_URL")
	}
	if target == "" {
		target = defaultURL
	}
	if *local && *gatewayURL != "" {
		return usagef("--local and --url exclude each other")
	}
	src := healthOrigin{Source: "local", Dir: *dir}
	var r health.Report
	if !*local {
		gr, err := gatewayHealth(ctx, target, *apiKey)
		switch {
		case err == nil:
			r, src = gr, healthOrigin{Source: "gateway", URL: target}
		case explicit && errors.Is(err, client.ErrUnreachable):
			// A gateway named on purpose that does not answer is no
			// reason to report on another installation.
			return fmt.Errorf("cannot reach the gateway at %s (%s): start it, or check the manifests folder here with --local", target, cause(err))
		case !errors.Is(err, client.ErrUnreachable):
			return err // it answers, but not with its report
		default:
			src.Fallback = fmt.Sprintf("no gateway answers at %s (%s)", target, cause(err))
		}
	}
	if src.Source == "local" {
		if *state == "" {
			*state = filepath.Join(*dir, ".picobot")
		}
		r = healthService(*dir, *state, *bin, env, modelcheck.NewProber()).Report(ctx)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(struct {
			healthOrigin
			health.Report
		}{src, r}, "", "  ")
		_, _ = out.Write(append(b, '\n'))
	} else {
		_, _ = io.WriteString(out, src.header()+"\n\n"+r.Text())
	}
	if !r.OK {
		return errChecksFailed
	}
	return nil
}

// healthOrigin says which report `picobot health` shows.
type healthOrigin struct {
	// Source is "gateway" (the running gateway's report) or "local" (the
	// checks of the manifests folder, made here).
	Source string `json:"source"`
	URL    string `json:"url,omitempty"`
	Dir    string `json:"dir,omitempty"`
	// Fallback says why the local checks were made: no gateway answered.
	Fallback string `json:"fallback,omitempty"`
}

func (o healthOrigin) header() string {
	if o.Source == "gateway" {
		return "Health of the running gateway at " + o.URL
	}
	h := "Local checks of the manifests folder " + o.Dir
	if o.Fallback != "" {
		h += " (" + o.Fallback + "; start it with `picobot serve`, or point --url at it)"
	}
	return h
}

// gatewayHealth asks the gateway at url for its report.
func gatewayHealth(ctx context.Context, url, apiKey string) (health.Report, error) {
	c, err := client.New(url, client.Options{APIKey: apiKey, HTTPClient: &http.Client{Timeout: healthTimeout}})
	if err != nil {
		return health.Report{}, usagef("--url: %v", err)
	}
	h, err := c.Health(ctx)
	if err != nil {
		return health.Report{}, err
	}
	if h.Groups == nil {
		return health.Report{}, fmt.Errorf("the gateway at %s answers %q but shows its checks only with a valid API key: pass --api-key or set PICOBOT_API_KEY", url, h.Status)
	}
	groups := make([]health.Group, len(h.Groups))
	for i, g := range h.Groups {
		cs := make([]health.Check, len(g.Checks))
		for j, c := range g.Checks {
			cs[j] = health.Check{Name: c.Name, OK: c.OK, Message: c.Message, Fix: c.Fix, Kind: health.Kind(c.Kind)}
		}
		groups[i] = health.Group{Kind: health.Kind(g.Kind), Name: g.Name, Checks: cs}
	}
	return health.NewReport(groups...), nil
}

// healthService builds the health service of an embedded installation:
// core (manifests, state folder, each agent's model), enabled features (the
// browser when an agent enables it) and optional programs.
func healthService(dir, state, bin string, env func(string) string, probe *modelcheck.Prober) *health.Service {
	set, loadErr := manifest.Load(dir)
	core := health.Source{Kind: health.Core, Name: "runtime", Run: func(context.Context) []health.Check {
		cs := []health.Check{health.WritableDir("state folder", state)}
		if loadErr != nil {
			return append(cs, health.Check{Name: "manifests", Message: loadErr.Error(),
				Fix: "fix the manifests in " + dir + " (see config/samples/agents_v1alpha1_agent.yaml)"})
		}
		if len(set.Agents) == 0 {
			return append(cs, health.Check{Name: "manifests", Message: "no Agent manifest in " + dir,
				Fix: "add an Agent manifest to " + dir + " (see config/samples/agents_v1alpha1_agent.yaml)"})
		}
		return append(cs, health.Check{Name: "manifests", OK: true, Message: fmt.Sprintf("%d agent(s) in %s", len(set.Agents), dir)})
	}}
	models := health.Source{Kind: health.Core, Name: "model", Run: func(ctx context.Context) []health.Check {
		if loadErr != nil {
			return nil
		}
		return modelChecks(ctx, set, dir, env, probe)
	}}
	svc := health.NewService(core, models)
	svc.Add(toolHostSources()...)
	if loadErr == nil && browserEnabled(set) {
		svc.Add(health.Source{Kind: health.Feature, Name: "browser", Run: func(ctx context.Context) []health.Check {
			return browsertool.Checks(ctx, bin)
		}})
	}
	return svc
}

// toolHostSources check the programs and the sandbox the agent's tools run
// with, wherever they run (`picobot serve` adds its own, with its warm
// sandboxes).
func toolHostSources() []health.Source {
	return []health.Source{health.Programs(), {Kind: health.Optional, Name: "tool sandbox", Run: func(context.Context) []health.Check {
		return sandbox.Probe().Checks()
	}}}
}

// podHealthService is the health service of a session pod: its tools'
// programs and sandbox; cluster.RunSession adds the agent's model and
// feature checks (the gateway reports the shared services).
func podHealthService() *health.Service { return health.NewService(toolHostSources()...) }

func browserEnabled(set *manifest.Set) bool {
	for _, a := range set.Agents {
		if b := a.Spec.Browser; b == nil || b.Enabled == nil || *b.Enabled {
			return true
		}
	}
	return false
}

// modelChecks resolves each agent's model the way `picobot serve` does and
// probes the endpoint of a configured one.
func modelChecks(ctx context.Context, set *manifest.Set, dir string, env func(string) string, probe *modelcheck.Prober) []health.Check {
	secrets := map[string]*corev1.Secret{}
	var defaults *corev1.ConfigMap
	for _, u := range set.Other {
		switch u.GetKind() {
		case "Secret":
			s := &corev1.Secret{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s) == nil {
				if s.Data == nil {
					s.Data = map[string][]byte{}
				}
				for k, v := range s.StringData {
					s.Data[k] = []byte(v)
				}
				secrets[s.Name] = s
			}
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm) == nil && cm.Name == picobotv1alpha1.NamespaceDefaultsConfigMap {
				defaults = cm
			}
		}
	}
	out := make([]health.Check, len(set.Agents))
	var wg sync.WaitGroup
	for i := range set.Agents {
		a := &set.Agents[i]
		keys := agenthost.WithProviderKeys(agenthost.EnvSecrets(secrets, env, a), env, a)
		res := agentspec.ResolveModel(a.Spec.Model, defaults, keys)
		reason := res.Message
		if m := a.Spec.Model; res.Effective == nil && m != nil && m.APIKeySecretRef != nil {
			reason += ". " + agenthost.KeyHint(a, *m.APIKeySecretRef, dir)
		}
		wg.Go(func() { out[i] = probe.Check(ctx, "agent "+a.Name, agenthost.ModelEndpoint(res, keys), reason) })
	}
	wg.Wait()
	return out
}
