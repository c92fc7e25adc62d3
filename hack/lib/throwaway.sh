# Shared by the scripts that start throwaway servers in a folder of their own
# (hack/s3.sh, hack/versitygw.sh). The sourcing script defines log and sets
# SERVER_COMM, the command name of its server, and STATE_PARENT, where its
# folders are.

# is_server PID: the process is alive and is the script's server, so a
# recycled pid is never signalled.
is_server() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 1
  local comm
  comm=$(ps -p "$pid" -o comm= 2>/dev/null) || return 1
  [ "$(basename -- "$comm")" = "$SERVER_COMM" ]
}

# watch_owner OWNER PID DIR ends the server PID and removes DIR when the
# process OWNER exits without stopping it (a test killed mid-run).
watch_owner() {
  local owner=$1 pid=$2 dir=$3
  (
    while kill -0 "$owner" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
    if is_server "$pid"; then kill "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
  ) >/dev/null 2>&1 </dev/null &
}

# stop_server_dir DIR PREFIX stops the server of DIR (SIGTERM, SIGKILL after
# 5 s) and removes DIR, which must be a folder named PREFIX.* that the
# script made.
stop_server_dir() {
  local dir=$1 prefix=$2 pid
  case "$dir" in
    */"$prefix".*) ;;
    *) log "refusing to remove $dir: not a folder made by '$0 start'"; exit 2 ;;
  esac
  [ -d "$dir" ] || return 0
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  if [ -n "$pid" ] && is_server "$pid"; then
    kill "$pid" 2>/dev/null || true
    local _
    for _ in $(seq 1 50); do
      is_server "$pid" || break
      sleep 0.1
    done
    if is_server "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -rf "$dir"
}

# await_port PID FIND...: prints the port the command FIND... prints, once
# it prints one; nothing when PID exits first or after 10 s.
await_port() {
  local pid=$1 port="" _
  shift
  for _ in $(seq 1 100); do
    port=$("$@")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$port"
}

# stop_endpoint URL PREFIX stops the servers of the folders PREFIX.* whose
# endpoint is URL.
stop_endpoint() {
  local dir
  for dir in "$STATE_PARENT/$2".*; do
    if [ -f "$dir/endpoint" ] && [ "$(cat "$dir/endpoint")" = "$1" ]; then
      stop_server_dir "$dir" "$2"
    fi
  done
}
