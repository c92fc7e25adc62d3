package skill

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/policy"
	skilltool "github.com/picobot/picobot/runtime/tool/skill"
)

// DefaultSyncTimeout bounds how long Build waits for the ConfigMap watch's
// first list in cluster mode.
const DefaultSyncTimeout = 30 * time.Second

// Options configure the skills feature.
type Options struct {
	// ManifestsDir is the embedded-mode manifests folder: its skills/
	// subfolder holds agent-level skills of every agent of the folder, and
	// its ConfigMap manifests serve spec.skills configMapRef entries (and, when
	// labelled SharedLabel=true, shared skills). Unused in cluster mode.
	ManifestsDir string
	// Home is the folder holding .picobot/skills and .agents/skills in
	// embedded mode (os.UserHomeDir() when empty).
	Home string
	// SyncTimeout bounds the wait for the ConfigMap watch in cluster mode
	// (DefaultSyncTimeout when zero).
	SyncTimeout time.Duration
	// Log receives warnings about broken skills (the host's logger when nil).
	Log *slog.Logger
}

// Feature gives agents skills and the get_skill tool. One Feature serves
// every agent of a process.
type Feature struct {
	opts Options

	installOnce sync.Once
	installErr  error

	manifestsOnce sync.Once
	manifestCMs   []*corev1.ConfigMap
	manifestsErr  error
}

var _ feature.Feature = (*Feature)(nil)

// NewFeature returns the skills feature; pass it in feature.Host.Features
// (embedded.Options.Features in embedded mode).
func NewFeature(opts Options) *Feature {
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	return &Feature{opts: opts}
}

// Name implements feature.Feature.
func (f *Feature) Name() string { return "skills" }

// Build implements feature.Feature. Skills never stop an agent from
// loading: what cannot be read is skipped and reported by Health.
func (f *Feature) Build(ctx context.Context, a *feature.Agent) (feature.Parts, error) {
	log := f.opts.Log
	if log == nil {
		log = a.Host.Log
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("agent", a.Spec.Name)
	checkName := "agent " + a.Spec.Name + " skills"
	if !policy.Allowed(a.Policy, skilltool.Name) {
		return feature.Parts{Health: func(context.Context) []health.Check {
			return []health.Check{{Name: checkName, OK: true, Message: "get_skill is not in the agent's tool set, so no skills are offered"}}
		}}, nil
	}
	namespace := a.Spec.Namespace
	if namespace == "" {
		namespace = a.Host.Tenant
	}
	var sources []source
	var notes []Problem // problems of the setup itself
	var closeFn func()
	if a.Host.Mode == feature.ModeCluster {
		sources, notes, closeFn = f.clusterSources(ctx, a, namespace, log)
	} else {
		sources, notes = f.embeddedSources(a, namespace, log)
	}
	for _, n := range notes {
		log.Warn("Skills are limited", "origin", n.Origin, "error", n.Err)
	}
	cat := newCatalog(log, sources...)
	return feature.Parts{
		Tools:  []tool.Tool{skilltool.New(cat)},
		Prompt: cat.Prompt,
		Health: func(ctx context.Context) []health.Check { return cat.health(ctx, checkName, notes) },
		Close:  closeFn,
	}, nil
}

// clusterSources lists the skill sources of an agent in cluster mode, with the setup's problems and the watch's close function.
func (f *Feature) clusterSources(ctx context.Context, a *feature.Agent, namespace string, log *slog.Logger) ([]source, []Problem, func()) {
	var sources []source
	var notes []Problem
	var closeFn func()
	var cms configMaps
	switch kube := a.Host.Kube.(type) {
	case nil:
		notes = append(notes, Problem{Level: LevelShared, Origin: "cluster", Err: fmt.Errorf("no Kubernetes client, so ConfigMap skills are not available"),
			Fix: "run the session with a Kubernetes client"})
	case client.WithWatch:
		w := startWatch(ctx, kube, namespace, refNames(a.Spec), f.opts.SyncTimeout, log)
		cms, closeFn = w, w.close
	default:
		cms = &clientConfigMaps{c: kube, namespace: namespace}
	}
	sources = append(sources, newSpecSource(a.Spec.Spec.Skills, cms))
	if cms != nil {
		sources = append(sources, &sharedSource{cms: cms})
	}
	sources = append(sources, newBuiltinSource())
	return sources, notes, closeFn
}

// embeddedSources lists the skill sources of an agent in embedded mode, with the setup's problems.
func (f *Feature) embeddedSources(a *feature.Agent, namespace string, log *slog.Logger) ([]source, []Problem) {
	var sources []source
	var notes []Problem
	var cms configMaps
	if f.opts.ManifestsDir != "" {
		if all, err := f.manifestConfigMaps(); err != nil {
			notes = append(notes, Problem{Level: LevelAgent, Origin: f.opts.ManifestsDir, Err: err, Fix: "fix the manifests"})
		} else {
			cms = newStaticConfigMaps(f.opts.ManifestsDir, namespace, all)
		}
	}
	agentSources := []source{newSpecSource(a.Spec.Spec.Skills, cms)}
	if f.opts.ManifestsDir != "" {
		agentSources = append(agentSources, newFolderSource(filepath.Join(f.opts.ManifestsDir, "skills"), LevelAgent))
	}
	sources = append(sources, agentSources...)
	if cms != nil {
		sources = append(sources, &sharedSource{cms: cms})
	}
	home, err := f.home()
	if err != nil {
		notes = append(notes, Problem{Level: LevelShared, Origin: "home folder", Err: err, Fix: "set HOME"})
	} else {
		picobot := filepath.Join(home, ".picobot", "skills")
		f.install(picobot, log)
		if f.installErr != nil {
			notes = append(notes, Problem{Level: LevelBuiltin, Origin: picobot, Err: f.installErr,
				Fix: "make " + picobot + " writable; the built-in skills are still served from the binary"})
		}
		sources = append(sources, newFolderSource(picobot, LevelShared), newBuiltinSource(),
			newFolderSource(filepath.Join(home, ".agents", "skills"), LevelUser))
	}
	return sources, notes
}

// health reports the skill count and one failed check per problem.
func (c *Catalog) health(ctx context.Context, name string, notes []Problem) []health.Check {
	snap := c.Snapshot(ctx)
	msg := fmt.Sprintf("%d skills", len(snap.Skills))
	if len(snap.Skills) > 0 {
		msg += " (" + snap.countBySource() + ")"
	}
	checks := []health.Check{{Name: name, OK: true, Message: msg}}
	for _, p := range append(append([]Problem(nil), notes...), snap.Problems...) {
		checks = append(checks, health.Check{Name: name + ": " + p.Origin, OK: false, Message: p.Err.Error(), Fix: p.Fix})
	}
	return checks
}

// refNames lists the ConfigMaps an Agent's skills name.
func refNames(a *picobotv1alpha1.Agent) []string {
	var out []string
	for _, s := range a.Spec.Skills {
		if s.ConfigMapRef != nil && validateRef(s.ConfigMapRef) == nil {
			out = append(out, s.ConfigMapRef.Name)
		}
	}
	return out
}

func (f *Feature) home() (string, error) {
	if f.opts.Home != "" {
		return f.opts.Home, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("failed to find the home folder for ~/.picobot/skills and ~/.agents/skills: %w", err)
	}
	return h, nil
}

// install puts the built-in skills into dir once per process.
func (f *Feature) install(dir string, log *slog.Logger) {
	f.installOnce.Do(func() {
		installed, err := InstallBuiltins(dir)
		if len(installed) > 0 {
			log.Info("Installed built-in skills", "folder", dir, "skills", installed)
		}
		if err != nil {
			f.installErr = err
			log.Warn("Failed to install built-in skills", "folder", dir, "error", err)
		}
	})
}

// manifestConfigMaps loads the ConfigMap manifests of the manifests folder
// once; embedded mode reads that folder only at start.
func (f *Feature) manifestConfigMaps() ([]*corev1.ConfigMap, error) {
	f.manifestsOnce.Do(func() {
		set, err := manifest.Load(f.opts.ManifestsDir)
		if err != nil {
			f.manifestsErr = fmt.Errorf("failed to load ConfigMap manifests from %s: %w", f.opts.ManifestsDir, err)
			return
		}
		for _, u := range set.Other {
			if u.GetKind() != "ConfigMap" {
				continue
			}
			cm := &corev1.ConfigMap{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm); err != nil {
				f.manifestsErr = fmt.Errorf("failed to read ConfigMap %s in %s: %w", u.GetName(), f.opts.ManifestsDir, err)
				return
			}
			f.manifestCMs = append(f.manifestCMs, cm)
		}
	})
	return f.manifestCMs, f.manifestsErr
}
