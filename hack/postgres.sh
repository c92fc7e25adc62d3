#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for tests and prints, on two lines, its DSN
# and the folder to pass to `stop`. Installs Debian's postgresql when no server is
# on the machine. The cluster trades durability for speed (fsync off) and listens
# on loopback only. TCP connections need a password (scram-sha-256; the
# superuser postgres gets a generated one, carried in the printed DSN), so
# tests of per-role isolation mean something; the Unix socket in DIR, which
# only this script uses, trusts its peers. Never use it for real data.
#
#   hack/postgres.sh start          # PICOBOT_PG_PORT=5433 to choose the port; else a free one
#   hack/postgres.sh stop DIR       # stop the cluster and delete DIR (no-op if gone)
#   hack/postgres.sh halt DIR       # stop the server (fast shutdown), keeping DIR and its data
#   hack/postgres.sh resume DIR     # start a halted server again on its port and data
#
# halt and resume are what a PostgreSQL restart looks like to clients (tests of
# reconnection use them); both are idempotent.
#
# PostgreSQL refuses to run as root, so as root the cluster belongs to the
# `postgres` user (created by the Debian package).
set -euo pipefail

. "$(dirname "$0")/lib/apt.sh"

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

# launch BIN DIR PORT: starts the server of DIR on PORT and waits until it
# accepts connections.
launch() {
  as_pg "$1/pg_ctl" -D "$2/data" -l "$2/server.log" -w -t 30 start \
    -o "-p $3 -k $2 -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    >/dev/null 2>&1
}

start() {
  apt_install postgresql pg_bindir
  local bin dir port
  bin=$(pg_bindir)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/picobot-pg.XXXXXX")
  chmod 755 "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
  fi
  # The password is hex, so it needs no escaping in the DSN.
  local password
  password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  printf '%s\n' "$password" >"$dir/pwfile"
  chmod 600 "$dir/pwfile"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir/pwfile"
  fi
  if ! as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile="$dir/pwfile" -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1; then
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
    if launch "$bin" "$dir" "$port"; then
      echo "$port" >"$dir/port"
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
  rm -f "$dir/pwfile"
  echo "postgres://postgres:$password@127.0.0.1:$port/picobot?sslmode=disable"
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

# check_dir DIR: DIR must be a cluster folder made by start.
check_dir() {
  case "${1:-}" in
    */picobot-pg.*) ;;
    *) echo "usage: $0 halt|resume DIR (a folder made by '$0 start')" >&2; exit 2 ;;
  esac
  [ -f "$1/port" ] || { log "$1 has no server to halt or resume"; exit 1; }
}

halt() {
  check_dir "${1:-}"
  local bin
  bin=$(pg_bindir)
  if as_pg "$bin/pg_ctl" -D "$1/data" status >/dev/null 2>&1; then
    # A fast shutdown, as `pg_ctl restart` does: clients are disconnected,
    # committed work is kept.
    as_pg "$bin/pg_ctl" -D "$1/data" -m fast -w -t 60 stop >/dev/null
  fi
}

resume() {
  check_dir "${1:-}"
  local bin
  bin=$(pg_bindir)
  if as_pg "$bin/pg_ctl" -D "$1/data" status >/dev/null 2>&1; then
    return 0
  fi
  if ! launch "$bin" "$1" "$(cat "$1/port")"; then
    log "failed to start the server again:"
    tail -n 20 "$1/server.log" >&2 || true
    exit 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  halt) halt "${2:-}" ;;
  resume) resume "${2:-}" ;;
  *) echo "usage: $0 start | stop DIR | halt DIR | resume DIR" >&2; exit 2 ;;
esac
