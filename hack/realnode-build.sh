#!/usr/bin/env bash
# Builds the node components of a real single-node Kubernetes (kubelet,
# kube-scheduler, kube-controller-manager, kube-proxy), CoreDNS and
# kube-router (its NetworkPolicy firewall is the node's policy engine) from Go
# modules, one at a time, caches them outside the clone keyed by version,
# installs the Debian packages the node runs on (containerd, runc, CNI plugins,
# umoci, iptables, ipset, conntrack), and prints the folder of the binaries.
# kube-apiserver and etcd come from hack/controlplane.sh.
#
#   hack/realnode-build.sh                 # build what is missing, print the folder
#   hack/realnode-build.sh kubelet ...     # build only these (still prints the folder)
#
# Cost on a 2-core machine shared with other builds: kubelet ~20 min the first
# time, kube-controller-manager ~5 min, the others under a minute each once
# kubelet's packages are in the build cache; kube-router ~7 min. About 440 MB
# of binaries.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
# The only v2 the module proxy serves. Its advisory GHSA-v5mh-h5hx-7v92
# (GoBGP's unauthenticated gRPC server on the node address) is the BGP
# router's, which the node does not run (--run-router=false); its
# dependencies are early 2024's. A test node's engine, not a recommendation.
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
BIN="$CACHE/k8s/$K8S_VERSION-node"
COMPONENTS=(kubelet kube-scheduler kube-controller-manager kube-proxy)

log() { echo "realnode-build: $*" >&2; }
# shellcheck source=hack/lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"

# node_module prepares (once) a throwaway module that requires k8s.io/kubernetes
# with every staging module pointed at its published version, as
# hack/controlplane.sh does for kube-apiserver.
node_module() {
  local src="$CACHE/src/kube-node-$K8S_VERSION"
  mkdir -p "$src"
  cd "$src"
  [ -f go.sum ] && return 0
  [ -f go.mod ] || go mod init picobot.local/kube-node >/dev/null 2>&1
  local gomod
  gomod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  local staging_ver="v0.${K8S_VERSION#v1.}"
  local args=(-require="k8s.io/kubernetes@$K8S_VERSION")
  while read -r mod; do
    args+=(-replace="$mod=$mod@$staging_ver")
  done < <(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | sort -u)
  go mod edit "${args[@]}"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    local c
    for c in "${COMPONENTS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } > tools.go
  log "resolving the node components' $K8S_VERSION modules"
  go mod tidy >/dev/null
}

build_component() {
  local name=$1
  node_module
  local major minor
  major=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
  minor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
  local pkg=k8s.io/component-base/version start=$SECONDS
  log "building $name $K8S_VERSION"
  # -p=1 and nice: other builds share the machine's two cores.
  CGO_ENABLED=0 nice -n 10 go build -p=1 -trimpath -o "$BIN/$name.tmp" -ldflags "-s -w \
    -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor \
    -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
    "k8s.io/kubernetes/cmd/$name"
  mv "$BIN/$name.tmp" "$BIN/$name"
  log "built $name in $((SECONDS - start)) s"
}

# build_coredns builds CoreDNS from its Go module with only the plugins a
# cluster's DNS needs (CoreDNS's documented way to a custom build: a main that
# imports the plugins and sets dnsserver.Directives), not the cloud DNS plugins
# of the stock binary. It runs as a node process, not a pod, so no image is
# needed.
build_coredns() {
  local src="$CACHE/src/coredns-$COREDNS_VERSION" start=$SECONDS
  mkdir -p "$src"
  cd "$src"
  if [ ! -f go.sum ]; then
    [ -f go.mod ] || go mod init picobot.local/coredns >/dev/null 2>&1
    cat > main.go <<'GO'
// Command coredns is CoreDNS with the plugins of a cluster's DNS only.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"log", "errors", "health", "ready", "cache", "kubernetes"}
}

func main() { coremain.Run() }
GO
    GOFLAGS=-mod=mod go get "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null
  fi
  log "building coredns $COREDNS_VERSION"
  CGO_ENABLED=0 nice -n 10 go build -p=1 -trimpath -ldflags "-s -w" -o "$BIN/coredns.tmp" .
  mv "$BIN/coredns.tmp" "$BIN/coredns"
  log "built coredns in $((SECONDS - start)) s"
}

# build_kube_router builds kube-router from its Go module; the node runs its
# NetworkPolicy controller only. sigs.k8s.io/kube-network-policies would be
# the first choice, but it queues packets with nftables' queue expression,
# which these VMs' kernels lack (CONFIG_NFT_QUEUE is not set, and they load no
# modules); kube-router's iptables + ipset rules need only what they have.
build_kube_router() {
  local src="$CACHE/src/kube-router-$KUBE_ROUTER_VERSION" start=$SECONDS
  mkdir -p "$src"
  cd "$src"
  if [ ! -f go.sum ]; then
    [ -f go.mod ] || go mod init picobot.local/kube-router >/dev/null 2>&1
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"\n' >tools.go
    GOFLAGS=-mod=mod go get "github.com/cloudnativelabs/kube-router/v2@$KUBE_ROUTER_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null
  fi
  log "building kube-router $KUBE_ROUTER_VERSION"
  CGO_ENABLED=0 nice -n 10 go build -p=1 -trimpath -o "$BIN/kube-router.tmp" -ldflags "-s -w \
    -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
  mv "$BIN/kube-router.tmp" "$BIN/kube-router"
  log "built kube-router in $((SECONDS - start)) s"
}

install_packages() {
  apt_install containerd containerd --version
  apt_install runc runc --version
  apt_install containernetworking-plugins test -x /usr/lib/cni/bridge
  apt_install umoci umoci --version
  apt_install iptables iptables --version
  apt_install conntrack conntrack --version
  apt_install ipset ipset --version
}

mkdir -p "$BIN"
install_packages
# One build at a time across concurrent callers.
exec 8>"$BIN/.lock"
flock 8
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${COMPONENTS[@]}" coredns kube-router)
for c in "${wanted[@]}"; do
  [ -x "$BIN/$c" ] && continue
  case "$c" in
    coredns) (build_coredns) ;;
    kube-router) (build_kube_router) ;;
    kubelet|kube-scheduler|kube-controller-manager|kube-proxy) (build_component "$c") ;;
    *) log "unknown component $c (want ${COMPONENTS[*]} coredns kube-router)"; exit 2 ;;
  esac
done
echo "$BIN"
