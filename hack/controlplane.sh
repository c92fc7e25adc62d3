#!/usr/bin/env bash
# Builds kube-apiserver and etcd from Go modules (setup-envtest cannot download on
# machines without access to GitHub releases), caches them outside the clone keyed by
# version, and prints the folder to use as KUBEBUILDER_ASSETS.
#
#   hack/controlplane.sh            # build if missing, print the assets folder
#
# Cost on a 2-core machine: kube-apiserver ~7-18 min the first time, etcd ~75 s.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
ASSETS="$CACHE/k8s/$K8S_VERSION-etcd$ETCD_VERSION"

log() { echo "controlplane: $*" >&2; }

build_apiserver() {
  local src="$CACHE/src/kube-apiserver-$K8S_VERSION"
  mkdir -p "$src"
  cd "$src"
  if [ ! -f go.mod ]; then
    go mod init picobot.local/kube-apiserver >/dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    local staging_ver="v0.${K8S_VERSION#v1.}"
    # Every k8s.io staging module is replaced by a ./staging path upstream; point each
    # at its published version instead.
    local args=(-require="k8s.io/kubernetes@$K8S_VERSION")
    while read -r mod; do
      args+=(-replace="$mod=$mod@$staging_ver")
    done < <(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | sort -u)
    go mod edit "${args[@]}"
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
    log "resolving kube-apiserver $K8S_VERSION modules"
    go mod tidy >/dev/null
  fi
  local major minor
  major=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
  minor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
  local pkg=k8s.io/component-base/version
  log "building kube-apiserver $K8S_VERSION (several minutes the first time)"
  CGO_ENABLED=0 go build -trimpath -o "$ASSETS/kube-apiserver.tmp" -ldflags "-s -w \
    -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor \
    -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
    k8s.io/kubernetes/cmd/kube-apiserver
  mv "$ASSETS/kube-apiserver.tmp" "$ASSETS/kube-apiserver"
}

build_etcd() {
  local src="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$src"
  cd "$src"
  if [ ! -f go.mod ]; then
    go mod init picobot.local/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
  fi
  log "building etcd $ETCD_VERSION"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ASSETS/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
}

build_kubectl() {
  # Only on machines without kubectl: reuses the kube-apiserver scratch module.
  local src="$CACHE/src/kube-apiserver-$K8S_VERSION"
  cd "$src"
  log "building kubectl $K8S_VERSION (no kubectl on PATH)"
  local pkg=k8s.io/component-base/version
  CGO_ENABLED=0 go build -trimpath -o "$ASSETS/kubectl.tmp" -ldflags "-s -w -X $pkg.gitVersion=$K8S_VERSION" k8s.io/kubernetes/cmd/kubectl
  mv "$ASSETS/kubectl.tmp" "$ASSETS/kubectl"
}

mkdir -p "$ASSETS"
# One build at a time across concurrent callers (make test runs packages in parallel).
exec 9>"$ASSETS/.lock"
flock 9
[ -x "$ASSETS/etcd" ] || (build_etcd)
[ -x "$ASSETS/kube-apiserver" ] || (build_apiserver)
if ! command -v kubectl >/dev/null 2>&1 && [ ! -x "$ASSETS/kubectl" ]; then (build_kubectl); fi
echo "$ASSETS"
