#!/usr/bin/env bash
# Builds the images the real node (hack/realnode.sh) runs, without Docker or a
# registry: each is a root folder packed into an OCI image layout by umoci and
# written as an OCI archive, which `ctr images import` (hack/realnode.sh
# import) and any OCI tool (skopeo, crane, oras) read. Prints the archive's
# path.
#
#   hack/realnode-images.sh picobot [TAG]   # localhost/picobot:TAG (default dev) from this checkout
#   hack/realnode-images.sh browser [TAG]   # localhost/picobot-browser:TAG: Debian + Chromium, and /picobot from this checkout
#   hack/realnode-images.sh pause           # localhost/picobot-pause:3.10, the pods' sandbox image
#   hack/realnode-images.sh coredns         # localhost/picobot-coredns:VERSION, the cluster DNS (hack/realnode-build.sh's CoreDNS)
#   hack/realnode-images.sh netcheck        # localhost/picobot-netcheck:dev, the NetworkPolicy e2e's probe (hack/realnode/netcheck)
#
# The picobot image holds what images/picobot/Dockerfile's final stage holds:
# /picobot and /operator built the same way (static, -trimpath -s -w), CA
# certificates, time zones, and an /etc/passwd with the non-root user 65532
# that the chart runs as; no shell. Archives go to $PICOBOT_CACHE/realnode-images.
#
# The picobot-browser image holds what images/picobot-browser/Dockerfile's
# final stage holds: a Debian bookworm root made by mmdebstrap from Debian's
# archive with the Dockerfile's packages (Chromium, fonts, tini; no
# recommends, no package lists), the user 65532, and /picobot. The Debian root
# is one layer, cached by its package list; /picobot is a second layer added
# by `umoci insert`, so a rebuild costs the go build and seconds.
#
# Cost: the go build (seconds when cached) plus about 5 s of umoci; the
# browser image's Debian layer the first time: mmdebstrap (downloads and
# installs about 150 packages) and umoci compressing it.
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
  write_archive "$work/oci" "$name" "$archive"
  rm -rf "$work"
}

# write_archive LAYOUT NAME ARCHIVE: names the image of the OCI layout
# LAYOUT, whose one tag is NAME's, for containerd and writes it as ARCHIVE.
write_archive() {
  local layout=$1 name=$2 archive=$3
  local tag=${name##*:}
  umoci gc --layout "$layout"
  # containerd names an imported image after this annotation.
  sed -i "s#\"org.opencontainers.image.ref.name\":\"$tag\"#&,\"io.containerd.image.name\":\"$name\"#" "$layout/index.json"
  grep -q io.containerd.image.name "$layout/index.json" || { log "failed to name $name in index.json"; exit 1; }
  mkdir -p "$(dirname "$archive")"
  tar -C "$layout" -cf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
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

# The browser image's Debian packages: images/picobot-browser/Dockerfile's
# (test/helm checks they agree).
BROWSER_SUITE=bookworm
BROWSER_PACKAGES=(chromium ca-certificates fonts-liberation fonts-noto-cjk fonts-noto-color-emoji tini)

# browser_base prints the OCI layout (tag base) of the browser image's Debian
# layer, made once per package list.
browser_base() {
  local key
  key=$(echo "$BROWSER_SUITE ${BROWSER_PACKAGES[*]}" | sha256sum | cut -c1-12)
  local base="$OUT/browser-base-$key"
  [ -f "$base/index.json" ] && { echo "$base"; return; }
  apt_install mmdebstrap mmdebstrap --version
  local work start=$SECONDS
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-browser.XXXXXX")
  log "making the browser image's Debian $BROWSER_SUITE root (once): ${BROWSER_PACKAGES[*]}"
  # minbase without recommends and without documentation, as bookworm-slim
  # and the Dockerfile's --no-install-recommends; the Dockerfile's user; no
  # package lists (its rm -rf /var/lib/apt/lists/*).
  local IFS=,
  mmdebstrap --variant=minbase --mode=root --format=tar \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --include="${BROWSER_PACKAGES[*]}" \
    --customize-hook='chroot "$1" groupadd --gid 65532 picobot' \
    --customize-hook='chroot "$1" useradd --uid 65532 --gid 65532 --home-dir /home/picobot --create-home --shell /usr/sbin/nologin picobot' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$BROWSER_SUITE" "$work/rootfs.tar" \
    "deb http://deb.debian.org/debian $BROWSER_SUITE main" \
    "deb http://deb.debian.org/debian $BROWSER_SUITE-updates main" \
    "deb http://deb.debian.org/debian-security $BROWSER_SUITE-security main" >&2
  unset IFS
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:base"
  umoci raw add-layer --image "$work/oci:base" "$work/rootfs.tar"
  rm -rf "$base.tmp"
  mv "$work/oci" "$base.tmp"
  mv "$base.tmp" "$base"
  rm -rf "$work"
  log "made the browser image's Debian layer in $((SECONDS - start)) s"
  echo "$base"
}

browser() {
  local tag=${1:-dev}
  local archive="$OUT/picobot-browser-$tag.tar" base work
  base=$(browser_base)
  work=$(mktemp -d "${TMPDIR:-/tmp}/picobot-browser.XXXXXX")
  cp -a "$base" "$work/oci"
  gobuild "$work/picobot" ./runtime/cmd/picobot
  umoci insert --image "$work/oci:base" --tag "$tag" "$work/picobot" /picobot
  umoci config --image "$work/oci:$tag" --os linux --architecture "$(go env GOARCH)" \
    --config.entrypoint /usr/bin/tini --config.entrypoint -- --config.entrypoint /picobot --config.entrypoint browser \
    --config.user 65532:65532 --config.workingdir /home/picobot \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.env HOME=/home/picobot
  umoci rm --image "$work/oci:base"
  write_archive "$work/oci" "localhost/picobot-browser:$tag" "$archive"
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
  browser) browser "${2:-}" ;;
  *) sed -n '8,12p' "$0" >&2; exit 2 ;;
esac
