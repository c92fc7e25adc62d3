#!/usr/bin/env bash
# Installs a pinned Go tool into the cache outside the clone (once) and prints
# its path. Tools with large dependency graphs stay out of go.mod this way.
# Safe from parallel callers (test packages run in parallel): one install at a
# time per tool, under a lock beside the binary.
#
#   hack/tool.sh golangci-lint|helm|gofakes3|versitygw
set -euo pipefail
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
case "${1:-}" in
  golangci-lint) pkg=github.com/golangci/golangci-lint/v2/cmd/golangci-lint; ver=v2.15.0 ;;
  helm)          pkg=helm.sh/helm/v3/cmd/helm; ver=v3.22.0 ;;
  gofakes3)      pkg=github.com/johannesboyne/gofakes3/cmd/gofakes3; ver=v1.2.0 ;;   # hack/s3.sh
  versitygw)     pkg=github.com/versity/versitygw/cmd/versitygw; ver=v1.8.0 ;;       # hack/versitygw.sh
  *) echo "usage: $0 golangci-lint|helm|gofakes3|versitygw" >&2; exit 2 ;;
esac
bin="$CACHE/tools/$1-$ver/$1"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  exec 9>"$bin.lock"; flock 9
  if [ ! -x "$bin" ]; then
    echo "tool: installing $1 $ver (once)" >&2
    # From / so that no go.mod or go.work of the caller's folder has a say.
    (cd / && GOBIN="$(dirname "$bin")" GOFLAGS=-mod=mod go install "$pkg@$ver") >&2
  fi
fi
echo "$bin"
