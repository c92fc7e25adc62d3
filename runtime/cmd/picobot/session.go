package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/cluster"
)

// session is `picobot session`, the main of a cluster-mode session pod. The
// operator configures it through the environment (see runtime/cluster).
func session(args []string) error {
	fs := flag.NewFlagSet("session", flag.ContinueOnError)
	fs.Usage = func() {
		fs.Output().Write([]byte("Usage: picobot session\n\nRuns one session pod: waits for a wake, serves that chat until idle, exits.\n" +
			"Configured by the operator through PICOBOT_TENANT, PICOBOT_AGENT, PICOBOT_POD, PICOBOT_POSTGRES_URL,\n" +
			"PICOBOT_REDIS_URL, PICOBOT_S3_* and PICOBOT_SECRET_<NAME>_<KEY>.\n"))
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	closeFeatures := func() {}
	defer func() { closeFeatures() }()
	err := cluster.RunSession(ctx, cluster.SessionOptions{Log: log, Features: func(svc *cluster.Services) []agenthost.Feature {
		// Messages to chat platforms leave through the gateway, which holds
		// the channels' credentials.
		var feats []agenthost.Feature
		feats, closeFeatures = features(featureOptions{log: log, sender: cluster.RemoteSender{Bus: svc.Bus, Redis: svc.Redis}, cron: true})
		return feats
	}})
	if errors.Is(err, context.Canceled) {
		return nil // terminated while warm
	}
	return err
}
