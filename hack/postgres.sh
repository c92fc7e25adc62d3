#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for tests and prints, on two lines, its DSN
# and the folder to pass to `stop`. Installs Debian's postgresql when no server is
# on the machine. The cluster trades durability for speed (fsync off) and listens
# on loopback only with trust authentication: never use it for real data.
#
#   hack/postgres.sh start          # PICOBOT_PG_PORT=5433 to choose the port; else a free one
#   hack/postgres.sh stop DIR       # stop the cluster and delete DIR (no-op if gone)
#
# PostgreSQL refuses to run as root, so as root the cluster belongs to the
# `postgres` user (created by the Debian package).
set -euo pipefail

log() { echo "postgres: $*" >&2; }

pg_bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then
    echo "$d"
    return 0
  fi
  return 1
}

ensure_installed() {
  if pg_bindir >/dev/null; then
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    log "PostgreSQL is not installed and installing it needs root"
    exit 1
  fi
  log "installing Debian postgresql (once)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  pg_bindir >/dev/null || { log "postgresql installed but initdb not found"; exit 1; }
}

# as_pg runs a command as the cluster's owner.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

random_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 30000))
    if ! port_busy "$p"; then
      echo "$p"
      return 0
    fi
  done
  log "no free port found"
  return 1
}

start() {
  ensure_installed
  local bin dir port
  bin=$(pg_bindir)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/picobot-pg.XXXXXX")
  chmod 755 "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
  fi
  if ! as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1; then
    log "initdb failed:"
    cat "$dir/initdb.log" >&2
    rm -rf "$dir"
    exit 1
  fi
  # A port found free can be taken before the server binds it; retry a few times
  # (only with ports we chose ourselves).
  local attempt started=""
  for attempt in 1 2 3 4 5; do
    port=${PICOBOT_PG_PORT:-$(random_port)}
    if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 start \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
      >/dev/null 2>&1; then
      started=1
      break
    fi
    if [ -n "${PICOBOT_PG_PORT:-}" ]; then
      break
    fi
    log "start on port $port failed (attempt $attempt), retrying"
  done
  if [ -z "$started" ]; then
    log "failed to start the server:"
    cat "$dir/server.log" >&2 || true
    rm -rf "$dir"
    exit 1
  fi
  if ! as_pg "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 \
    -c 'CREATE DATABASE picobot' >/dev/null 2>"$dir/psql.log"; then
    log "failed to create database picobot:"
    cat "$dir/psql.log" >&2
    stop "$dir"
    exit 1
  fi
  echo "postgres://postgres@127.0.0.1:$port/picobot?sslmode=disable"
  echo "$dir"
}

stop() {
  local dir=${1:-}
  if [ -z "$dir" ]; then
    echo "usage: $0 stop DIR" >&2
    exit 2
  fi
  case "$dir" in
    */picobot-pg.*) ;;
    *) log "refusing to remove $dir: not a folder made by '$0 start'"; exit 2 ;;
  esac
  if [ ! -d "$dir" ]; then
    return 0
  fi
  if [ -f "$dir/data/postmaster.pid" ]; then
    local bin
    bin=$(pg_bindir)
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
