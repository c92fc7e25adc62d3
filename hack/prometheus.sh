#!/usr/bin/env bash
# Builds Prometheus (cmd/prometheus) or its promtool (cmd/promtool) from the Go
# module, caches the binary outside the clone keyed by version, and prints its path.
# The e2e tests that scrape PicoBot's /metrics with a real Prometheus
# (test/e2e/embedded/prometheus_test.go, test/e2e/cluster/prometheus_test.go) run
# the server; the chart's alert rule tests (test/helm/alerts_test.go) run promtool.
#
#   hack/prometheus.sh             # build Prometheus if missing, print its path
#   hack/prometheus.sh promtool    # build promtool if missing, print its path
#
# Built with the remove_all_sd tag: no service discovery plugin (Kubernetes,
# the clouds, Consul, ...), only static scrape configs, which is what the tests
# use, and less to build (the full cmd/prometheus had not finished
# after 50 minutes at -p=1 on a loaded 2-core machine; this one took 24.5,
# docs/metrics.md). The web UI's assets are
# not built in (no builtinassets tag): the HTTP API works without them.
# Both binaries come from one module folder with the same tags and flags, so
# promtool reuses most of the packages compiled for the server.
set -euo pipefail

# Prometheus v3.N.M is published to the module proxy as v0.3NN.M.
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
OUT="$CACHE/prometheus/$PROMETHEUS_VERSION-static"

log() { echo "prometheus: $*" >&2; }

case "${1:-prometheus}" in
  prometheus | promtool) BIN=${1:-prometheus} ;;
  *) echo "usage: $0 [prometheus|promtool]" >&2; exit 2 ;;
esac

build() {
  local src="$CACHE/src/prometheus-$PROMETHEUS_VERSION"
  mkdir -p "$src"
  cd "$src"
  # A folder made before promtool was built here has no tools import of it
  # (go mod tidy would have left out its modules): resolve again.
  if [ ! -f go.mod ] || ! grep -q cmd/promtool tools.go 2>/dev/null; then
    [ -f go.mod ] || go mod init picobot.local/prometheus >/dev/null 2>&1
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
GO
    log "resolving Prometheus $PROMETHEUS_VERSION modules"
    go get "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null
  fi
  log "building $BIN $PROMETHEUS_VERSION (minutes the first time)"
  CGO_ENABLED=0 go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$OUT/$BIN.tmp" "github.com/prometheus/prometheus/cmd/$BIN"
  mv "$OUT/$BIN.tmp" "$OUT/$BIN"
}

mkdir -p "$OUT"
# One build at a time across concurrent callers.
exec 9>"$OUT/.lock"
flock 9
[ -x "$OUT/$BIN" ] || (build)
echo "$OUT/$BIN"
