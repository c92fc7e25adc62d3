#!/usr/bin/env bash
# Starts and stops throwaway redis-server instances for tests and local runs,
# installing Debian's redis-server when it is missing. Each instance lives in a
# folder of its own (pid file, log, port, data), which is how stop finds it.
#
#   hack/redis.sh start [--port P] [--dir D] [--appendonly]
#       prints two lines: redis://:PASSWORD@127.0.0.1:P and the folder D
#   hack/redis.sh stop D [--keep]
#       stops the server of D and removes D (--keep: keeps the data, so a
#       `start --dir D --port P` brings the same data back)
#
# Both are idempotent: start on a folder whose server runs prints it again; stop
# of a stopped or missing server succeeds.
#
# The default user (the admin) needs a password, generated once per folder
# and kept in D/password (so a restart on D keeps it): a client without it
# can do nothing, which is what tests of per-tenant ACL users rely on.
#
# By default the server persists nothing (--save '' --appendonly no): tests want
# speed, and a restart loses everything, unacked stream entries included. With
# --appendonly (or REDIS_APPENDONLY=yes) it keeps an append-only file fsynced on
# every write, like production's AOF, so a server killed and started again on the
# same folder comes back with every acknowledged write; tests that crash Redis use
# it.
set -euo pipefail

. "$(dirname "$0")/lib/apt.sh"

log() { echo "redis.sh: $*" >&2; }
usage() { sed -n '2,14p' "$0" >&2; exit 2; }

# running DIR: succeeds when the pid file of DIR names a live redis-server.
running() {
  local pid
  pid=$(cat "$1/redis.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  # A zombie or a recycled pid has another (or an empty) command line.
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q redis-server
}

# ping PORT DIR: the server of DIR answers on PORT.
ping() { REDISCLI_AUTH=$(cat "$2/password" 2>/dev/null) redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }

# ensure_password DIR: makes DIR/password (hex, so it needs no escaping).
ensure_password() {
  [ -s "$1/password" ] && return
  od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$1/password"
  chmod 600 "$1/password"
}

url() { echo "redis://:$(cat "$1/password")@127.0.0.1:$2"; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# launch DIR PORT APPENDONLY: starts the server and waits until it answers
# (loading an append-only file can take a moment).
launch() {
  local dir=$1 port=$2 aof=$3
  # The password goes in through a config file on stdin, not the command
  # line that ps shows.
  local args=(- --port "$port" --bind 127.0.0.1 --save '' --daemonize yes
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir")
  if [ "$aof" = yes ]; then
    args+=(--appendonly yes --appendfsync always)
  else
    args+=(--appendonly no)
  fi
  rm -f "$dir/redis.pid"
  printf 'requirepass %s\n' "$(cat "$dir/password")" | redis-server "${args[@]}" >&2
  for _ in $(seq 200); do
    ping "$port" "$dir" && return 0
    # A daemonized server that failed (port taken) leaves no live process.
    if [ -s "$dir/redis.pid" ] && ! running "$dir"; then break; fi
    sleep 0.05
  done
  return 1
}

start() {
  local port="" dir="" aof=${REDIS_APPENDONLY:-no}
  while [ $# -gt 0 ]; do
    case "$1" in
      --port) port=$2; shift 2 ;;
      --dir) dir=$2; shift 2 ;;
      --appendonly) aof=yes; shift ;;
      *) usage ;;
    esac
  done
  apt_install redis-server command -v redis-server
  if [ -n "$dir" ] && running "$dir" && ping "$(cat "$dir/port")" "$dir"; then
    url "$dir" "$(cat "$dir/port")"
    echo "$dir"
    return
  fi
  [ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/tmp}/picobot-redis.XXXXXX")
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  ensure_password "$dir"
  local tries=1 pick=""
  [ -n "$port" ] || { pick=yes; tries=20; }
  for _ in $(seq "$tries"); do
    if [ -n "$pick" ]; then
      port=$((20000 + RANDOM % 40000))
      port_free "$port" || continue
    fi
    echo "$port" >"$dir/port"
    if launch "$dir" "$port" "$aof"; then
      url "$dir" "$port"
      echo "$dir"
      return
    fi
  done
  log "failed to start redis-server on port $port; log follows"
  cat "$dir/redis.log" >&2 2>/dev/null || true
  exit 1
}

stop() {
  local dir=${1:-} keep=""
  [ -n "$dir" ] || usage
  [ "${2:-}" = --keep ] && keep=yes
  if running "$dir"; then
    local pid
    pid=$(cat "$dir/redis.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      running "$dir" || break
      sleep 0.05
    done
    if running "$dir"; then
      log "redis-server $pid ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  if [ -z "$keep" ]; then
    # Only folders this script made or was given for Redis: never a stray path.
    if [ -f "$dir/port" ] || [ -f "$dir/redis.log" ]; then
      rm -rf "$dir"
    fi
  fi
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) usage ;;
esac
