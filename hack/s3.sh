#!/usr/bin/env bash
# Starts a throwaway S3-protocol server for tests and local runs: gofakes3's
# standalone command, installed once into the cache outside the clone (MinIO is
# AGPL and unmaintained). It listens on a free loopback port, accepts any
# credentials, and keeps objects in memory (or in a folder with --data DIR).
# Clients must use path-style addressing and the printed URL as the endpoint.
#
#   hack/s3.sh start [--owner-pid PID] [--data DIR] [--bucket NAME]
#       prints the endpoint URL (http://127.0.0.1:PORT); PORT=9000 to choose the
#       port. --owner-pid ends the server once process PID exits (tests pass
#       their own pid, so a crashed test run leaves nothing behind). --bucket
#       creates that bucket at start.
#   hack/s3.sh stop URL|PORT|DIR   ends that server (no-op if already gone)
#   hack/s3.sh stop                ends every server this script started
#
# Cost: the first start installs the server (~10-20 s); later starts take ~0.1 s.
set -euo pipefail

STATE_PARENT=${TMPDIR:-/tmp}
SERVER_COMM=gofakes3

. "$(dirname "$0")/lib/throwaway.sh"

log() { echo "s3: $*" >&2; }

start() {
  local owner="" data="" bucket=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --owner-pid) owner=${2:?--owner-pid needs a pid}; shift 2 ;;
      --data) data=${2:?--data needs a folder}; shift 2 ;;
      --bucket) bucket=${2:?--bucket needs a name}; shift 2 ;;
      *) echo "usage: $0 start [--owner-pid PID] [--data DIR] [--bucket NAME]" >&2; exit 2 ;;
    esac
  done
  local bin
  bin=$("$(dirname "$0")/tool.sh" gofakes3)
  local dir
  dir=$(mktemp -d "$STATE_PARENT/picobot-s3.XXXXXX")
  # Port 0 lets the kernel choose a free port at bind time (no race); the
  # server logs the one it got.
  local args=(-host "127.0.0.1:${PORT:-0}" -quiet)
  if [ -n "$data" ]; then
    args+=(-backend fs -fs.path "$data" -fs.create)
  else
    args+=(-backend memory)
  fi
  if [ -n "$bucket" ]; then
    args+=(-initialbucket "$bucket")
  fi
  # The log exists before the server starts: the background job opens it
  # only once it runs, and the loop below may read it first.
  : >"$dir/server.log"
  # Detached from our stdout/stderr, so callers reading them see EOF now.
  "$bin" "${args[@]}" >"$dir/server.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"
  local port
  port=$(await_port "$pid" sed -n 's/.*using port: \([0-9]*\).*/\1/p' "$dir/server.log")
  if [ -z "$port" ]; then
    log "failed to start gofakes3:"
    cat "$dir/server.log" >&2 || true
    stop_dir "$dir"
    exit 1
  fi
  local url="http://127.0.0.1:$port"
  echo "$url" >"$dir/endpoint"
  if [ -n "$owner" ]; then watch_owner "$owner" "$pid" "$dir"; fi
  echo "$url"
}

stop_dir() { stop_server_dir "$1" picobot-s3; }

stop() {
  local target=${1:-} dir
  if [ -z "$target" ]; then
    for dir in "$STATE_PARENT"/picobot-s3.*; do
      [ -d "$dir" ] && stop_dir "$dir"
    done
    return 0
  fi
  if [ -d "$target" ]; then
    stop_dir "$target"
    return 0
  fi
  case "$target" in
    http://*|https://*) ;;
    *[!0-9]*) echo "usage: $0 stop [URL|PORT|DIR]" >&2; exit 2 ;;
    *) target="http://127.0.0.1:$target" ;;
  esac
  stop_endpoint "${target%/}" picobot-s3
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start [--owner-pid PID] [--data DIR] [--bucket NAME] | stop [URL|PORT|DIR]" >&2; exit 2 ;;
esac
