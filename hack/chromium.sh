#!/usr/bin/env bash
# Makes sure headless Chromium is installed (Debian's chromium package) for the
# browser tool and its tests, and prints the path of the browser binary. Safe
# to run often and from parallel callers: it installs at most once.
#
#   hack/chromium.sh        prints /usr/lib/chromium/chromium (installing it when missing)
#
# go-rod never downloads a browser in this project: the driver always runs this
# binary (or the one named by --chromium / the Driver's Bin).
set -euo pipefail

BIN=/usr/lib/chromium/chromium
log() { echo "chromium.sh: $*" >&2; }

if [ ! -x "$BIN" ]; then
  exec 9>"${TMPDIR:-/tmp}/picobot-chromium-install.lock"
  flock 9
  if [ ! -x "$BIN" ]; then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    log "installing chromium (once)"
    "${sudo[@]}" apt-get update >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y chromium >&2
  fi
  exec 9>&-
fi
[ -x "$BIN" ] || { log "chromium is not at $BIN after installing"; exit 1; }
echo "$BIN"
