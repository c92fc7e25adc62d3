// Command localcluster runs PicoBot's cluster mode on this machine, the way
// the cluster end-to-end tests (test/e2e/cluster) do: a real kube-apiserver +
// etcd with the CRDs, throwaway PostgreSQL, Redis and S3-protocol servers
// (hack/postgres.sh, redis.sh, s3.sh), the gateway and the operator as
// processes, and session pods run as local processes of the picobot binary
// by the local pod runner (test/podrunner) instead of a kubelet. It applies
// a tenant namespace with an Agent to chat with, waits until the Agent is
// Ready, and prints the web UI's address and the `picobot ask` / `picobot
// chat` lines that reach it. Without a model key the Agent talks to the
// scripted demo model (runtime/provider/fakellm's Demo), as `make run` does
// with PICOBOT_FAKE_LLM=1. Ctrl-C stops everything and removes the state.
//
// `make run-operator` (hack/run-local.sh) runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	o := options{}
	flag.StringVar(&o.state, "state", ".picobot/cluster", "Folder of the run's logs, pod folders and manifests (emptied at start).")
	flag.StringVar(&o.kubeconfig, "write-kubeconfig", ".picobot/kubeconfig", "Where to write the kubeconfig.")
	flag.StringVar(&o.picobot, "picobot", "bin/picobot", "The picobot binary (gateway, migrations and session pods).")
	flag.StringVar(&o.operator, "operator", "bin/operator", "The operator binary.")
	flag.StringVar(&o.addr, "addr", envOr("PICOBOT_ADDR", "127.0.0.1:8090"), "Address of the gateway and web UI (default $PICOBOT_ADDR, else 127.0.0.1:8090).")
	flag.StringVar(&o.namespace, "namespace", envOr("PICOBOT_NAMESPACE", "demo"), "The tenant namespace of the example Agent (default $PICOBOT_NAMESPACE, else demo).")
	flag.StringVar(&o.samples, "samples", "", "A folder of manifests applied to the namespace too (config/samples); empty: none.")
	flag.BoolVar(&o.fakeLLM, "fake-llm", os.Getenv("PICOBOT_FAKE_LLM") == "1", "Use the demo model even when a model key is set (default: when $PICOBOT_FAKE_LLM is 1).")
	flag.Parse()
	o.model = modelFromEnv(o.fakeLLM)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// model is the example Agent's model: a provider's key from the
// environment, or none for the demo model.
type model struct {
	provider, name, baseURL, key string
}

// modelFromEnv picks the model as hack/run-embedded.sh does: OpenAI's key
// first, then Anthropic's; none (the demo model) when fake is set or
// neither is.
func modelFromEnv(fake bool) model {
	switch {
	case fake:
	case os.Getenv("OPENAI_API_KEY") != "":
		return model{provider: "openai", name: envOr("PICOBOT_MODEL", "gpt-4o-mini"), baseURL: os.Getenv("OPENAI_BASE_URL"), key: os.Getenv("OPENAI_API_KEY")}
	case os.Getenv("ANTHROPIC_API_KEY") != "":
		return model{provider: "anthropic", name: envOr("PICOBOT_MODEL", "claude-sonnet-4-5"), baseURL: os.Getenv("ANTHROPIC_BASE_URL"), key: os.Getenv("ANTHROPIC_API_KEY")}
	}
	return model{}
}
