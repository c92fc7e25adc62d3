package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/sandbox"
	browsertool "github.com/picobot/picobot/runtime/tool/browser"
)

// errChecksFailed makes `picobot health` exit non-zero.
var errChecksFailed = errors.New("health checks failed")

// healthCmd is `picobot health [--json]`.
func healthCmd(args []string) error {
	return runHealth(context.Background(), args, os.Getenv, os.Stdout)
}

func runHealth(ctx context.Context, args []string, env func(string) string, out io.Writer) error {
	fs := newFlags("health", `Usage: picobot health [flags]

Checks what embedded mode needs (model keys, Chromium, the tool sandbox's kernel layers, the state
folder) and says how to fix what is missing. Exit code 1 when a check fails.
`)
	dir := fs.String("dir", ".", "Folder with Agent/CronJob/BrowserProfile manifests (and Secrets).")
	state := fs.String("state", "", "State folder (default <dir>/.picobot).")
	asJSON := fs.Bool("json", false, "Print the report as JSON.")
	bin := fs.String("chromium", browser.DefaultBin, "Chromium executable the browser tool uses.")
	if err := parseFlags(fs, args, out, os.Stderr); err != nil {
		return err
	}
	if *state == "" {
		*state = filepath.Join(*dir, ".picobot")
	}
	r := healthService(*dir, *state, *bin, env).Report(ctx)
	if *asJSON {
		_, _ = out.Write(append(r.JSON(), '\n'))
	} else {
		_, _ = io.WriteString(out, r.Text())
	}
	if !r.OK {
		return errChecksFailed
	}
	return nil
}

// healthService builds the health service of an embedded installation:
// core (manifests, state folder, each agent's model), enabled features (the
// browser when an agent enables it) and optional programs.
func healthService(dir, state, bin string, env func(string) string) *health.Service {
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
		cs = append(cs, health.Check{Name: "manifests", OK: true, Message: fmt.Sprintf("%d agent(s) in %s", len(set.Agents), dir)})
		return append(cs, modelChecks(set, dir, env)...)
	}}
	svc := health.NewService(core)
	svc.Add(toolHostSources()...)
	if loadErr == nil && browserEnabled(set) {
		svc.Add(health.Source{Kind: health.Feature, Name: "browser", Run: func(ctx context.Context) []health.Check {
			return browsertool.Checks(ctx, bin)
		}})
	}
	return svc
}

// toolHostSources check the programs and the sandbox the agent's tools run
// with, wherever they run.
func toolHostSources() []health.Source {
	return []health.Source{{Kind: health.Optional, Name: "programs", Run: func(context.Context) []health.Check {
		return []health.Check{
			health.FileSearch(),
			health.Executable("git", "apt-get install -y git", "git"),
			health.Executable("npx (MCP servers run with npx)", "apt-get install -y nodejs npm", "npx"),
		}
	}}, {Kind: health.Optional, Name: "tool sandbox", Run: func(context.Context) []health.Check {
		return sandbox.Probe().Checks()
	}}}
}

// podHealthService is the health service of a session pod: its tools'
// programs and sandbox (the operator and the Agent's status report the
// rest).
func podHealthService() *health.Service { return health.NewService(toolHostSources()...) }

func browserEnabled(set *manifest.Set) bool {
	for _, a := range set.Agents {
		if b := a.Spec.Browser; b == nil || b.Enabled == nil || *b.Enabled {
			return true
		}
	}
	return false
}

// modelChecks resolves each agent's model the way `picobot serve` does.
func modelChecks(set *manifest.Set, dir string, env func(string) string) []health.Check {
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
	var out []health.Check
	for i := range set.Agents {
		a := &set.Agents[i]
		res := agentspec.ResolveModel(a.Spec.Model, defaults, agenthost.WithProviderKeys(agenthost.EnvSecrets(secrets, env, a), env, a))
		c := health.Check{Name: "model of agent " + a.Name, OK: res.Effective != nil, Message: res.Message}
		if res.Effective != nil {
			c.Message = fmt.Sprintf("%s/%s (%s)", res.Effective.Provider, res.Effective.Model, res.Effective.Source)
		} else {
			c.Fix = "give the agent a model with a usable API key"
			if m := a.Spec.Model; m != nil && m.APIKeySecretRef != nil {
				sel := m.APIKeySecretRef
				c.Fix = agenthost.KeyHint(a, *sel, dir)
			}
		}
		out = append(out, c)
	}
	return out
}
