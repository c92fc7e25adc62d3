package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/agentconfig"
)

// build assembles one generation of the agents of a manifests folder. On an
// error nothing of it is left running.
func (r *Runtime) build(set *manifest.Set) (map[string]*agentGen, error) {
	secrets, defaults := otherObjects(set)
	quotas, err := quotasOf(set)
	if err != nil {
		return nil, err
	}
	root, rootErr := agentspec.RootAgent(set.Agents)
	gens := map[string]*agentGen{}
	closeAll := func() {
		for _, g := range gens {
			g.Close()
		}
	}
	for i := range set.Agents {
		a := &set.Agents[i]
		host := &agenthost.Host{Mode: agenthost.ModeEmbedded, Tenant: r.opts.Tenant, Store: r.state.Store, Artifacts: r.state.Artifacts,
			ArtifactURL: func(a store.Artifact) string { return "/api/v1/artifacts/" + a.ID },
			StateDir:    r.opts.StateDir, Holder: r.holder, Defaults: defaults, Log: r.opts.Log,
			Secrets:    agenthost.WithProviderKeys(agenthost.EnvSecrets(secrets, r.opts.Env, a), r.opts.Env, a),
			SecretHint: func(sel corev1.SecretKeySelector) string { return agenthost.KeyHint(a, sel, r.opts.Dir) },
			Features:   r.opts.Features,
			// Sub-agents run here too; r.agents is complete before a
			// turn can delegate.
			Delegates: r.delegates, Background: r.background, ActiveRuns: r.active, Exchanges: r.exchanges,
			WarmSandboxes: r.warm, Clock: r.opts.Clock, Health: r.opts.Health, Metrics: r.opts.Metrics,
			Budget: r.budget, Prices: r.prices, MaxCronJobs: r.maxCronJobs,
			ConfigSource: func(a *picobotv1alpha1.Agent) agentconfig.Source {
				if rootErr != nil || a.Name != root {
					return nil
				}
				return &folderSource{r: r, agent: a.Name}
			},
		}
		built, err := host.Build(r.ctx, a)
		if err != nil {
			closeAll()
			return nil, err
		}
		gens[a.Name] = &agentGen{Built: built, info: built.Info, spec: a, secrets: host.Secrets}
	}
	r.quotas.Store(quotas)
	r.generation++
	return gens, nil
}

// Reload re-reads the manifests folder, validates it as at start-up
// (schemas, CEL rules, the root agent rule, every agent assembled) and
// switches the agents to the new generation: turns that start from now on
// use it, a turn running finishes on the one it started with. When anything
// is wrong the running generation stays and the error names the file and
// the problem. It changes the agents the runtime started with: adding or
// removing an Agent, and changes of channels and CronJobs, need a restart
// of picobot serve.
func (r *Runtime) Reload(ctx context.Context) (string, error) {
	r.reloads.Lock()
	defer r.reloads.Unlock()
	set, err := manifest.Load(r.opts.Dir)
	if err != nil {
		return "", fmt.Errorf("failed to load manifests from %s: %w", r.opts.Dir, err)
	}
	var added, removed []string
	names := map[string]bool{}
	for _, a := range set.Agents {
		names[a.Name] = true
		if r.agents[a.Name] == nil {
			added = append(added, a.Name)
		}
	}
	for name := range r.agents {
		if !names[name] {
			removed = append(removed, name)
		}
	}
	if len(added)+len(removed) > 0 {
		slices.Sort(removed)
		return "", fmt.Errorf("the folder adds Agents [%s] and removes [%s]: a reload changes the running agents only; restart picobot serve to add or remove one",
			strings.Join(added, ", "), strings.Join(removed, ", "))
	}
	if _, err := agentspec.RootAgent(set.Agents); err != nil {
		return "", err
	}
	gens, err := r.build(set)
	if err != nil {
		return "", err
	}
	for name, g := range gens {
		a := r.agents[name]
		old := a.cur.Swap(g)
		for _, ta := range a.byTenant {
			ta.manager.Reconfigure(g.Session)
		}
		r.retired = append(r.retired, old.Built)
	}
	var list []string
	for name := range gens {
		list = append(list, name)
	}
	slices.Sort(list)
	r.log.Info("Reloaded the manifests folder", "generation", r.generation, "agents", list)
	return fmt.Sprintf("generation %d of %s (agents %s)", r.generation, r.opts.Dir, strings.Join(list, ", ")), nil
}

// folderSource is the root agent's configuration in the manifests folder.
type folderSource struct {
	r     *Runtime
	agent string
}

// Agent implements agentconfig.Source.
func (s *folderSource) Agent(context.Context) (*picobotv1alpha1.Agent, error) {
	_, a, _, err := s.find()
	return a, err
}

// find returns the file of the folder holding the agent's manifest, the
// Agent and how many objects the file holds.
func (s *folderSource) find() (string, *picobotv1alpha1.Agent, int, error) {
	entries, err := os.ReadDir(s.r.opts.Dir)
	if err != nil {
		return "", nil, 0, fmt.Errorf("failed to read manifests folder %s: %w", s.r.opts.Dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || (!strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(s.r.opts.Dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return "", nil, 0, fmt.Errorf("failed to read %s: %w", path, err)
		}
		set, err := manifest.LoadBytes(name, data)
		if err != nil {
			continue // Reload names it; it cannot be the agent's file to edit
		}
		for i := range set.Agents {
			if set.Agents[i].Name == s.agent {
				return path, &set.Agents[i], len(set.Agents) + len(set.CronJobs) + len(set.BrowserProfiles) + len(set.Other), nil
			}
		}
	}
	return "", nil, 0, fmt.Errorf("no valid manifest of Agent %s in %s", s.agent, s.r.opts.Dir)
}

// Update implements agentconfig.Source: the agent's manifest file is
// rewritten (atomically: a new file renamed over it) when the new Agent
// passes the loader's validation, and the whole folder still loads;
// otherwise the file is left as it was. The file must hold the Agent alone
// (a file of several objects is not rewritten), and comments in it are not
// kept.
func (s *folderSource) Update(_ context.Context, a *picobotv1alpha1.Agent) error {
	path, _, n, err := s.find()
	if err != nil {
		return err
	}
	if n > 1 {
		return fmt.Errorf("%s holds %d objects besides Agent %s; move the Agent to a file of its own to change it with this tool", path, n-1, s.agent)
	}
	meta := map[string]any{"name": a.Name}
	if a.Namespace != "" && a.Namespace != manifest.DefaultNamespace {
		meta["namespace"] = a.Namespace
	}
	if len(a.Labels) > 0 {
		meta["labels"] = a.Labels
	}
	if len(a.Annotations) > 0 {
		meta["annotations"] = a.Annotations
	}
	data, err := yaml.Marshal(map[string]any{"apiVersion": picobotv1alpha1.GroupVersion.String(), "kind": "Agent", "metadata": meta, "spec": a.Spec})
	if err != nil {
		return fmt.Errorf("failed to encode Agent %q: %w", a.Name, err)
	}
	if _, err := manifest.LoadBytes(filepath.Base(path), data); err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	if err := writeAtomic(path, data); err != nil {
		return err
	}
	if _, err := manifest.Load(s.r.opts.Dir); err != nil {
		return errors.Join(err, writeAtomic(path, old))
	}
	return nil
}

// writeAtomic replaces path's content with data: a reader sees the old
// file or the new one, never a part.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if st, err := os.Stat(path); err == nil {
		_ = tmp.Chmod(st.Mode().Perm())
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}

// Reload implements agentconfig.Source.
func (s *folderSource) Reload(ctx context.Context) (string, error) { return s.r.Reload(ctx) }

// Restart implements agentconfig.Source: embedded mode restarts the
// agents' runtimes by building them anew from the folder (MCP servers
// reconnected, tools reopened), as a reload does; the process stays.
func (s *folderSource) Restart(ctx context.Context) error {
	_, err := s.r.Reload(ctx)
	return err
}

// Generation is the number of the agents' running generation: 1 at start,
// one more with each reload that succeeded.
func (r *Runtime) Generation() int {
	r.reloads.Lock()
	defer r.reloads.Unlock()
	return r.generation
}
