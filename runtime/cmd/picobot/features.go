package main

import (
	"log/slog"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/skill"
	browsertool "github.com/picobot/picobot/runtime/tool/browser"
	"github.com/picobot/picobot/runtime/tool/messaging"
)

// featureOptions say where the features run.
type featureOptions struct {
	log *slog.Logger
	// manifestsDir is the embedded-mode manifests folder ("" in cluster mode).
	manifestsDir string
	// sender delivers send_message's messages; channels reports channel
	// status (nil in session pods: the agent spec is listed as declared).
	sender   messaging.Sender
	channels messaging.ChannelStatus
}

// features are the agent features both modes run (memory, skills,
// schedules, messaging, browser), in prompt order, and a function that
// releases what they hold (the browser driver's Chromium processes).
func features(o featureOptions) ([]agenthost.Feature, func()) {
	browser := browsertool.NewFeature(browsertool.FeatureConfig{})
	return []agenthost.Feature{
		skill.NewFeature(skill.Options{ManifestsDir: o.manifestsDir, Log: o.log}),
		messaging.NewFeature(messaging.Options{Sender: o.sender, Channels: o.channels}),
		browser,
	}, browser.Close
}
