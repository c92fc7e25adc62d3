package main

import (
	"context"
	"log/slog"

	"github.com/picobot/picobot/runtime/agenthost"
	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/healthtool"
	"github.com/picobot/picobot/runtime/health/modelcheck"
	"github.com/picobot/picobot/runtime/memory"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/skill"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/bot"
	"github.com/picobot/picobot/runtime/tool/bottask"
	browsertool "github.com/picobot/picobot/runtime/tool/browser"
	"github.com/picobot/picobot/runtime/tool/cron"
	"github.com/picobot/picobot/runtime/tool/messaging"
	nodestool "github.com/picobot/picobot/runtime/tool/nodes"
)

// featureOptions say where the features run.
type featureOptions struct {
	log *slog.Logger
	// manifestsDir is the embedded-mode manifests folder ("" in cluster mode).
	manifestsDir string
	// sender delivers send_message's and message's messages and runs
	// message's channel actions (the dispatcher; in session pods
	// cluster.RemoteSender, through the gateway); channels reports channel
	// status (nil in session pods: the agent spec is listed as declared).
	sender   messaging.Sender
	channels messaging.ChannelStatus
	// cron adds the scheduler's tools, the cron tools and bot_task /
	// bot_agenda, whose jobs are CronJobs the operator fires (session pods;
	// embedded mode's scheduler adds its own). It also marks a session pod,
	// which leaves memory consolidation and timeline expiry to the daily
	// maintenance run rather than repeating them in every pod.
	cron bool
	// browser configures the browser driver (session pods: browser pods
	// through remote.Provider; local Chromium when zero).
	browser driver.Config
	// health is the health service the health tool reports.
	health *health.Service
	// probe probes model endpoints (the health service's prober), so
	// bot_status tells an unreachable model from a working one.
	probe *modelcheck.Prober
	// onBrowser, when set, gets the browser feature (session pods run the
	// provider's lease heartbeat over its driver).
	onBrowser func(*browsertool.Feature)
	// instances and queue report where agents run and what waits for
	// them, for bot_status (unknown when nil).
	instances func(ctx context.Context, tenant, agent string) ([]bot.Instance, error)
	queue     func(ctx context.Context, tenant, agent string) (bot.Queue, error)
	// nodes reaches the tenants' paired devices for the nodes tool (none
	// when nil).
	nodes *node.Service
	// files reads and writes the workspace files of the runtime's own
	// tools (attachments, browser uploads, a node's media) where the
	// programs' files are: a sandbox pod's workspace, through the exec
	// relay (nil: the runtime's own folder, which a sandbox container
	// shares).
	files tool.WorkspaceFiles
}

// features are the agent features both modes run (memory, skills,
// schedules, messaging, browser), in prompt order, and a function that
// releases what they hold (the browser driver's Chromium processes).
func features(o featureOptions) ([]agenthost.Feature, func()) {
	browser := browsertool.NewFeature(browsertool.FeatureConfig{Driver: o.browser, Files: o.files})
	if o.onBrowser != nil {
		o.onBrowser(browser)
	}
	feats := []agenthost.Feature{
		memory.NewFeature(memory.Options{Log: o.log, NoConsolidation: o.cron, NoMaintenance: o.cron}),
		skill.NewFeature(skill.Options{ManifestsDir: o.manifestsDir, Log: o.log}),
		messaging.NewFeature(messaging.Options{Sender: o.sender, Channels: o.channels, Files: o.files}),
		browser,
		healthtool.NewFeature(o.health),
		bot.NewFeature(bot.Config{Instances: o.instances, Queue: o.queue, Sender: o.sender, Channels: o.channels, Probe: modelProbe(o.probe)}),
	}
	if o.cron {
		feats = append(feats, cron.NewFeature(cron.Config{}), bottask.NewFeature(bottask.Config{}))
	}
	if o.nodes != nil {
		feats = append(feats, nodestool.NewFeature(o.nodes, o.files))
	}
	return feats, browser.Close
}

// notices delivers scheduled runs' outcomes through the dispatcher, from the
// agent that owns the target channel.
type notices struct {
	sender messaging.Sender
	owner  func(channel string) string
}

// Deliver implements scheduler.Deliverer.
func (n notices) Deliver(ctx context.Context, no scheduler.Notice) error {
	target := no.Channel + ":" + no.ChatID
	_, err := n.sender.Deliver(store.WithTenant(ctx, no.Tenant), outbound.Message{Agent: n.owner(no.Channel), Target: target,
		Text: no.Text, Origin: no.ID})
	return err
}

// modelProbe is bot_status's reachability probe on the health service's
// prober (its results cached for both).
func modelProbe(p *modelcheck.Prober) bot.ModelProbe {
	if p == nil {
		return nil
	}
	return func(ctx context.Context, a *feature.Agent) (bool, string) {
		c := p.Check(ctx, "model", a.Endpoint, a.ModelMessage)
		return c.OK, c.Message
	}
}
