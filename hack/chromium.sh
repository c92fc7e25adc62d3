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

. "$(dirname "$0")/lib/apt.sh"

BIN=/usr/lib/chromium/chromium
log() { echo "chromium.sh: $*" >&2; }

apt_install chromium test -x "$BIN"
echo "$BIN"
