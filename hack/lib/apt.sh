# Shared by the scripts that need a Debian package on the machine
# (hack/redis.sh, hack/chromium.sh, hack/postgres.sh). The sourcing script
# defines log.

# apt_install PACKAGE CHECK...: installs Debian's PACKAGE unless the command
# CHECK... already succeeds (its output is discarded). One install at a time
# across all these scripts and their parallel callers (test packages run in
# parallel), since apt-get holds the dpkg lock; a caller that waited finds the
# package installed and installs nothing.
apt_install() {
  local package=$1
  shift
  "$@" >/dev/null 2>&1 && return 0
  exec 9>"${TMPDIR:-/tmp}/picobot-apt-install.lock"
  flock 9
  if ! "$@" >/dev/null 2>&1; then
    local sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    log "installing $package (once)"
    "${sudo[@]}" apt-get update >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y "$package" >&2
  fi
  exec 9>&-
  "$@" >/dev/null 2>&1 || { log "$package installed, but it is still missing: $*"; exit 1; }
}
