// Package memory gives agents long-term memory (picobot-architecture.md,
// "记忆系统"): the memory tools, the top matching Knowledge injected into every
// turn's system prompt, and idle consolidation of sessions into the
// Timeline. It plugs into agents as an feature.Feature; the memory model
// itself is in memory/longterm, segmentation for search in memory/segment,
// and the search in the stores (store.MemorySearcher).
package memory

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/memory/longterm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	memtool "github.com/picobot/picobot/runtime/tool/memory"
)

// FeatureName is the feature's name in errors and health reports.
const FeatureName = "memory"

// Options configure the memory feature.
type Options struct {
	// Log defaults to the host's logger.
	Log *slog.Logger
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// StaleAfter marks recalled memories older than this stale;
	// longterm.DefaultStaleAfter when zero.
	StaleAfter time.Duration
	// NoConsolidation turns idle consolidation off in this process (e.g. a
	// process that serves no sessions), whatever the Agent says.
	NoConsolidation bool
	// NoMaintenance turns off the daily removal of timeline memories past
	// their retention (routine_maintenance still does it on demand).
	NoMaintenance bool
}

// maintenanceEvery is how often the feature removes expired timeline
// memories.
const maintenanceEvery = 24 * time.Hour

// NewFeature returns the memory feature: for every agent with memory enabled
// (the default) it adds memory_store, memory_recall, timeline_recall,
// memory_forget, routine_maintenance, bot_remember and bot_recall, a prompt
// section with the Knowledge matching the turn, a daily removal of timeline
// memories past spec.memory.timelineRetentionDays and — when
// spec.memory.idleConsolidationMinutes is set — a Consolidator, both running
// until the agent is closed.
func NewFeature(opts Options) feature.Feature {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &memoryFeature{opts: opts}
}

type memoryFeature struct {
	opts Options
}

// Name implements feature.Feature.
func (f *memoryFeature) Name() string { return FeatureName }

// Build implements feature.Feature.
func (f *memoryFeature) Build(ctx context.Context, a *feature.Agent) (feature.Parts, error) {
	spec := a.Spec.Spec.Memory
	if spec == nil {
		spec = &picobotv1alpha1.MemorySpec{}
	}
	if spec.Enabled != nil && !*spec.Enabled {
		return feature.Parts{}, nil
	}
	if a.Host.Store == nil {
		return feature.Parts{}, errors.New("long-term memory needs a store, and the host has none")
	}
	log := f.opts.Log
	if log == nil {
		log = a.Host.Log
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("agent", a.Spec.Name)
	cfg := longterm.Config{Store: a.Host.Store, Agent: a.Spec.Name, StaleAfter: f.opts.StaleAfter, Clock: f.opts.Clock}
	if spec.TimelineRetentionDays != nil && *spec.TimelineRetentionDays > 0 {
		cfg.TimelineRetention = time.Duration(*spec.TimelineRetentionDays) * 24 * time.Hour
	}
	for _, s := range spec.AllowSensitive {
		cfg.AllowSensitive = append(cfg.AllowSensitive, longterm.Sensitive(s))
	}
	mem := longterm.New(cfg)
	parts := feature.Parts{
		Tools: memtool.New(mem, log),
		Prompt: func(ctx context.Context, turn session.PromptInput) string {
			return Section(ctx, mem, turn.Text, log)
		},
	}
	// Background loops outlive Build's context; they keep its values (the
	// tenant) and stop when the agent is closed.
	runCtx := context.WithoutCancel(ctx)
	if a.Host.Tenant != "" {
		runCtx = store.WithTenant(runCtx, a.Host.Tenant)
	}
	runCtx, cancel := context.WithCancel(runCtx)
	var wg sync.WaitGroup
	if spec.IdleConsolidationMinutes != nil && *spec.IdleConsolidationMinutes > 0 && !f.opts.NoConsolidation {
		c := &Consolidator{Store: a.Host.Store, Memory: mem, Provider: a.Provider,
			Idle: time.Duration(*spec.IdleConsolidationMinutes) * time.Minute, Clock: f.opts.Clock, Log: log}
		wg.Go(func() { c.Run(runCtx) })
	}
	if !f.opts.NoMaintenance {
		wg.Go(func() { f.maintain(runCtx, mem, log) })
	}
	parts.Close = func() {
		cancel()
		wg.Wait()
	}
	return parts, nil
}

// maintain removes expired timeline memories now and then daily.
func (f *memoryFeature) maintain(ctx context.Context, mem *longterm.Memory, log *slog.Logger) {
	t := f.opts.Clock.NewTicker(maintenanceEvery)
	defer t.Stop()
	for {
		if n, err := mem.PruneTimeline(ctx); err != nil && ctx.Err() == nil {
			log.Error("Failed to remove expired timeline memories", "err", err)
		} else if n > 0 {
			log.Info("Removed expired timeline memories", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
