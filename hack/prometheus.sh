#!/usr/bin/env bash
# Builds Prometheus (cmd/prometheus) from its Go module, caches the binary outside
# the clone keyed by version, and prints its path. The e2e test that scrapes
# PicoBot's /metrics with a real Prometheus (test/e2e/embedded/prometheus_test.go) runs it.
#
#   hack/prometheus.sh             # build if missing, print the binary's path
#
# Built with the remove_all_sd tag: no service discovery plugin (Kubernetes,
# the clouds, Consul, ...), only static scrape configs, which is what the tests
# use, and less to build (the full cmd/prometheus had not finished
# after 50 minutes at -p=1 on a loaded 2-core machine; this one took 24.5,
# docs/metrics.md). The web UI's assets are
# not built in (no builtinassets tag): the HTTP API works without them.
set -euo pipefail

# Prometheus v3.N.M is published to the module proxy as v0.3NN.M.
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
OUT="$CACHE/prometheus/$PROMETHEUS_VERSION-static"

log() { echo "prometheus: $*" >&2; }

build() {
  local src="$CACHE/src/prometheus-$PROMETHEUS_VERSION"
  mkdir -p "$src"
  cd "$src"
  if [ ! -f go.mod ]; then
    go mod init picobot.local/prometheus >/dev/null 2>&1
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
GO
    log "resolving Prometheus $PROMETHEUS_VERSION modules"
    go get "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null
  fi
  log "building Prometheus $PROMETHEUS_VERSION (minutes the first time)"
  CGO_ENABLED=0 go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$OUT/prometheus.tmp" github.com/prometheus/prometheus/cmd/prometheus
  mv "$OUT/prometheus.tmp" "$OUT/prometheus"
}

mkdir -p "$OUT"
# One build at a time across concurrent callers.
exec 9>"$OUT/.lock"
flock 9
[ -x "$OUT/prometheus" ] || (build)
echo "$OUT/prometheus"
