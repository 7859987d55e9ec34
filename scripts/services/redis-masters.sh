#!/usr/bin/env bash
# usage: scripts/services/redis-masters.sh start [N]|stop|pids
#   start N: N independent redis-servers (default 5; Redlock masters, no persistence) on 127.0.0.1 at
#            free ports; prints their URLs, comma-separated, and writes them to $STATE/urls and the
#            PIDs, one a line in the same order, to $STATE/pids (STATE=${FENCEPOST_STATE:-REPO/.state}/redis-masters)
#   pids:    prints those PIDs (for tests that SIGSTOP / SIGCONT masters)
#   stop:    stops every master (SIGCONT first: a stopped one cannot exit) and waits until gone
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/redis-masters

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

stop_one() {  # DIR
  local pidfile=$1/redis.pid pid
  # a redis-server removes its pidfile as it exits: gone between the check and the read
  pid=$(cat "$pidfile" 2>/dev/null) || return 0
  if alive "$pid" && [ "$(ps -o comm= -p "$pid")" = redis-server ]; then
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid"
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done  # up to 10 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$pidfile"
}

stop() {
  [ -d "$STATE" ] || return 0
  local d
  for d in "$STATE"/m*; do [ -d "$d" ] && stop_one "$d"; done
  rm -rf "$STATE"
}

start_one() {  # DIR: prints the URL
  local dir=$1 port
  mkdir -p "$dir"
  for _ in 1 2 3; do  # the free port can be taken between probe and bind: retry
    port=$(free_port)
    redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --save '' --appendonly no \
      --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
    for _ in $(seq 1 100); do ping "$port" && [ -s "$dir/redis.pid" ] && break; sleep 0.05; done
    if ping "$port" && [ -s "$dir/redis.pid" ]; then echo "redis://127.0.0.1:$port/0"; return 0; fi
    stop_one "$dir"
  done
  echo "redis master in $dir did not start; see $dir/redis.log" >&2; return 1
}

case "${1:-}" in
start)
  n=${2:-5}
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || { echo "N must be a positive integer, got $n" >&2; exit 2; }
  stop  # stale masters from an earlier run in the same state dir
  mkdir -p "$STATE"
  urls=() pids=()
  for i in $(seq 1 "$n"); do
    urls+=("$(start_one "$STATE/m$i")") || { stop; exit 1; }
    pids+=("$(cat "$STATE/m$i/redis.pid")")
  done
  printf '%s\n' "${pids[@]}" >"$STATE/pids"
  (IFS=,; echo "${urls[*]}") | tee "$STATE/urls" ;;
pids)
  cat "$STATE/pids" ;;
stop)
  stop ;;
*)
  sed -n 2p "$0" >&2; exit 2 ;;
esac
