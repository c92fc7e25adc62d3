#!/usr/bin/env bash
# `make run-operator`: cluster mode on this machine, as the cluster e2e tests
# run it (hack/localcluster): kube-apiserver + etcd, PostgreSQL, Redis and an
# S3-protocol server, the gateway, the operator, and session pods run as local
# processes by the local pod runner. Namespace demo gets Agent "chat" (and the
# samples of config/samples); once the chat answers, the web UI's address and
# the `picobot ask` / `picobot chat` lines are printed. Ctrl-C stops everything.
#
# Model: OPENAI_API_KEY (+ OPENAI_BASE_URL) or ANTHROPIC_API_KEY (+
# ANTHROPIC_BASE_URL), PICOBOT_MODEL; without a key (or with PICOBOT_FAKE_LLM=1)
# the demo model answers, which shows the tools at work. The samples reference
# Secret model-api-keys: without a key it holds placeholders, and their Agents
# say so (ModelResolved=False, reason PlaceholderKey) instead of being Ready.
# PICOBOT_ADDR sets the gateway's address (default 127.0.0.1:8090); BIN the
# folder of picobot, operator and localcluster (default bin, made by make
# build).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-bin}
export KUBEBUILDER_ASSETS
KUBEBUILDER_ASSETS=$(hack/controlplane.sh)
exec "$bin/localcluster" --picobot "$bin/picobot" --operator "$bin/operator" --samples config/samples "$@"
