#!/usr/bin/env bash
# Starts a throwaway S3 server that checks signatures, for tests of what S3
# itself refuses (presigned URLs used for another key, method or content,
# or expired). hack/s3.sh's gofakes3 accepts any credentials and any
# signature, so it cannot show those refusals. This is the Versity S3
# Gateway (Apache 2.0) over a folder, with one account; it is installed once
# into the cache outside the clone.
#
#   hack/versitygw.sh start [--owner-pid PID]
#       prints the endpoint URL with the account in its user info
#       (http://KEY:SECRET@127.0.0.1:PORT). --owner-pid ends the server once
#       process PID exits.
#   hack/versitygw.sh stop URL   ends that server (no-op if already gone)
#
# Cost: the first start builds the server (~5-10 min on a loaded 2-core
# machine, 80 MB); later starts take ~0.2 s. Clients must use path style.
set -euo pipefail

STATE_PARENT=${TMPDIR:-/tmp}
SERVER_COMM=versitygw

. "$(dirname "$0")/lib/throwaway.sh"

log() { echo "versitygw: $*" >&2; }

# listening_port PID prints the loopback port PID listens on, if any.
listening_port() {
  ss -Hltnp 2>/dev/null | sed -n "s/.*127\.0\.0\.1:\([0-9]*\) .*pid=$1,.*/\1/p" | head -1
}

start() {
  local owner=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --owner-pid) owner=${2:?--owner-pid needs a pid}; shift 2 ;;
      *) echo "usage: $0 start [--owner-pid PID]" >&2; exit 2 ;;
    esac
  done
  local bin
  bin=$("$(dirname "$0")/tool.sh" versitygw)
  local dir key secret
  dir=$(mktemp -d "$STATE_PARENT/picobot-vgw.XXXXXX")
  mkdir -p "$dir/data"
  key="vgw$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  secret=$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n')
  : >"$dir/server.log"
  # Port 0: the kernel chooses a free port at bind time; the server does
  # not log it, so it is read from the socket table.
  "$bin" --port 127.0.0.1:0 --access "$key" --secret "$secret" posix "$dir/data" >"$dir/server.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"
  local port
  port=$(await_port "$pid" listening_port "$pid")
  if [ -z "$port" ]; then
    log "failed to start:"
    cat "$dir/server.log" >&2 || true
    stop_dir "$dir"
    exit 1
  fi
  echo "http://127.0.0.1:$port" >"$dir/endpoint"
  if [ -n "$owner" ]; then watch_owner "$owner" "$pid" "$dir"; fi
  echo "http://$key:$secret@127.0.0.1:$port"
}

stop_dir() { stop_server_dir "$1" picobot-vgw; }

stop() {
  local target=${1:?usage: $0 stop URL}
  # Compare without the user info.
  stop_endpoint "$(echo "${target%/}" | sed 's|//[^@/]*@|//|')" picobot-vgw
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start [--owner-pid PID] | stop URL" >&2; exit 2 ;;
esac
