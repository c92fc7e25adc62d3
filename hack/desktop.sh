#!/usr/bin/env bash
# Makes sure the desktop pieces `picobot node` uses on Linux are installed
# for its tests: a D-Bus session bus (Debian's dbus), a virtual X display
# (xvfb) and ffmpeg for screen recording. Safe to run often and from
# parallel callers: each package is installed at most once.
#
#   hack/desktop.sh    prints the paths of dbus-daemon, Xvfb and ffmpeg, one a line
set -euo pipefail

. "$(dirname "$0")/lib/apt.sh"

log() { echo "desktop.sh: $*" >&2; }

apt_install dbus test -x /usr/bin/dbus-daemon
apt_install xvfb test -x /usr/bin/Xvfb
apt_install ffmpeg test -x /usr/bin/ffmpeg
printf '%s\n' /usr/bin/dbus-daemon /usr/bin/Xvfb /usr/bin/ffmpeg
