#!/usr/bin/env bash
# Builds the images the real node (hack/realnode.sh) runs, without Docker or a
# registry: each is a root folder packed into an OCI image layout by umoci and
# written as an OCI archive, which `ctr images import` (hack/realnode.sh
# import) and any OCI tool (skopeo, crane, oras) read. Prints the archive's
# path.
#
#   hack/realnode-images.sh picobot [TAG]   # localhost/picobot:TAG (default dev) from this checkout
#   hack/realnode-images.sh pause           # localhost/picobot-pause:3.10, the pods' sandbox image
#   hack/realnode-images.sh coredns         # localhost/picobot-coredns:VERSION, the cluster DNS (hack/realnode-build.sh's CoreDNS)
#   hack/realnode-images.sh netcheck        # localhost/picobot-netcheck:dev, the NetworkPolicy e2e's probe (hack/realnode/netcheck)
#
# The picobot image holds what images/picobot/Dockerfile's final stage holds:
# /picobot and /operator built the same way (static, -trimpath -s -w), CA
# certificates, time zones, and an /etc/passwd with the non-root user 65532
# that the chart runs as; no shell. Archives go to $PICOBOT_CACHE/realnode-images.
#
# Cost: the go build (seconds when cached) plus about 5 s of umoci.
set -euo pipefail

HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
OUT="$CACHE/realnode-images"

log() { echo "realnode-images: $*" >&2; }
# shellcheck source=hack/lib/apt.sh
source "$HACK/lib/apt.sh"

# gobuild OUTPUT PACKAGE: as images/picobot/Dockerfile builds its binaries.
gobuild() {
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$1" "$2")
}

# pack ROOTFS NAME ARCHIVE CONFIG...: packs ROOTFS (owners and modes as they
# are) as the single layer of image NAME, with the umoci config flags CONFIG,
# into the OCI archive ARCHIVE.
pack() {
  local rootfs=$1 name=$2 archive=$3
  shift 3
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-image.XXXXXX")
  local tag=${name##*:}
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$tag"
  umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
  cp -a "$rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:$tag" "$work/bundle"
  umoci config --image "$work/oci:$tag" --os linux --architecture "$(go env GOARCH)" "$@"
  umoci gc --layout "$work/oci"
  # containerd names an imported image after this annotation.
  sed -i "s#\"org.opencontainers.image.ref.name\":\"$tag\"#&,\"io.containerd.image.name\":\"$name\"#" "$work/oci/index.json"
  grep -q io.containerd.image.name "$work/oci/index.json" || { log "failed to name $name in index.json"; rm -rf "$work"; exit 1; }
  mkdir -p "$(dirname "$archive")"
  tar -C "$work/oci" -cf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
  rm -rf "$work"
}

pause() {
  local archive="$OUT/pause.tar" work
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-rootfs.XXXXXX")
  gobuild "$work/pause" ./hack/realnode/pause
  pack "$work" localhost/picobot-pause:3.10 "$archive" --config.entrypoint /pause --config.user 65535:65535
  rm -rf "$work"
  echo "$archive"
}

# coredns packs the CoreDNS binary of hack/realnode-build.sh (static, the
# cluster DNS plugins only): the node runs it as a Deployment in kube-system,
# where the session pods' NetworkPolicy admits DNS, as on a real cluster.
coredns() {
  local bin version
  bin=$("$HACK/realnode-build.sh" coredns)
  version=$("$bin/coredns" -version | sed -n 's/^CoreDNS-\(.*\)/v\1/p')
  local archive="$OUT/coredns-$version.tar" work
  [ -f "$archive" ] && { echo "$archive"; return; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-rootfs.XXXXXX")
  cp "$bin/coredns" "$work/coredns"
  pack "$work" "localhost/picobot-coredns:$version" "$archive" --config.entrypoint /coredns
  rm -rf "$work"
  echo "$archive"
}

netcheck() {
  local archive="$OUT/netcheck.tar" work
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-rootfs.XXXXXX")
  gobuild "$work/netcheck" ./hack/realnode/netcheck
  pack "$work" localhost/picobot-netcheck:dev "$archive" --config.entrypoint /netcheck --config.cmd sleep --config.user 65532:65532
  rm -rf "$work"
  echo "$archive"
}

picobot() {
  local tag=${1:-dev}
  local archive="$OUT/picobot-$tag.tar" work
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-rootfs.XXXXXX")
  local r="$work/rootfs"
  mkdir -p "$r/etc/ssl/certs" "$r/usr/share" "$r/tmp" "$r/home/nonroot"
  gobuild "$r/picobot" ./runtime/cmd/picobot
  gobuild "$r/operator" ./operator/cmd
  apt_install ca-certificates test -s /etc/ssl/certs/ca-certificates.crt
  apt_install tzdata test -d /usr/share/zoneinfo/Europe
  cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  cp -a /usr/share/zoneinfo "$r/usr/share/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$r/etc/group"
  echo 'hosts: files dns' >"$r/etc/nsswitch.conf"
  chmod 1777 "$r/tmp"
  chown 65532:65532 "$r/home/nonroot"
  chmod 700 "$r/home/nonroot"
  pack "$r" "localhost/picobot:$tag" "$archive" --config.entrypoint /picobot --config.user 65532:65532 \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  rm -rf "$work"
  echo "$archive"
}

apt_install umoci umoci --version
case "${1:-}" in
  pause) pause ;;
  coredns) coredns ;;
  netcheck) netcheck ;;
  picobot) picobot "${2:-}" ;;
  *) sed -n '8,11p' "$0" >&2; exit 2 ;;
esac
