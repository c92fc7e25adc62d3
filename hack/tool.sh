#!/usr/bin/env bash
# Installs a pinned Go tool into the cache outside the clone (once) and prints
# its path. Tools with large dependency graphs stay out of go.mod this way.
#
#   hack/tool.sh golangci-lint     hack/tool.sh helm
set -euo pipefail
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
case "${1:-}" in
  golangci-lint) pkg=github.com/golangci/golangci-lint/v2/cmd/golangci-lint; ver=v2.15.0 ;;
  helm)          pkg=helm.sh/helm/v3/cmd/helm; ver=v3.22.0 ;;
  *) echo "usage: $0 golangci-lint|helm" >&2; exit 2 ;;
esac
bin="$CACHE/tools/$1-$ver/$1"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  exec 9>"$bin.lock"; flock 9
  if [ ! -x "$bin" ]; then
    echo "tool: installing $1 $ver (once)" >&2
    GOBIN="$(dirname "$bin")" GOFLAGS=-mod=mod go install "$pkg@$ver" >&2
  fi
fi
echo "$bin"
