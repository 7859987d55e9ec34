#!/usr/bin/env bash
# usage: scripts/services/etcd-cluster.sh start|stop|leader|kill-leader|restart NAME
#   start:       three etcd members n1 n2 n3 on 127.0.0.1 at free ports; prints the client URLs,
#                comma-separated, and writes them to $STATE/urls (STATE=${FENCEPOST_STATE:-REPO/.state}/etcd3)
#   leader:      prints "NAME URL" of the current leader
#   kill-leader: SIGKILLs the leader; prints "NAME URL"
#   restart NAME: starts a killed member again with its data dir (it rejoins)
#   stop:        stops every member and waits until they are gone
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/etcd3
MEMBERS="n1 n2 n3"

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
healthy() { curl -sf --max-time 1 "http://127.0.0.1:$1/health" | grep -q '"health":"true"'; }

launch() {  # NAME: start one member from its saved ports
  local n=$1 c p state
  c=$(cat "$STATE/$n/client"); p=$(cat "$STATE/$n/peer"); state=new
  [ -d "$STATE/$n/data" ] && state=existing
  nohup etcd --name "$n" --data-dir "$STATE/$n/data" \
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
    --initial-cluster "$(cat "$STATE/cluster")" --initial-cluster-state "$state" \
    --initial-cluster-token fencepost-test \
    --heartbeat-interval=50 --election-timeout=500 --unsafe-no-fsync \
    >>"$STATE/$n/etcd.log" 2>&1 </dev/null &
  echo $! >"$STATE/$n/pid"
}

leader() {  # prints "NAME URL" of the member that says it leads
  local n c
  for n in $MEMBERS; do
    c=$(cat "$STATE/$n/client")
    curl -sf --max-time 1 "http://127.0.0.1:$c/v3/maintenance/status" -d '{}' 2>/dev/null \
      | python3 -c 'import sys,json; s=json.load(sys.stdin); sys.exit(0 if s["header"]["member_id"]==s.get("leader") else 1)' \
      2>/dev/null && { echo "$n http://127.0.0.1:$c"; return 0; }
  done
  return 1
}

stop() {
  local n pid
  for n in $MEMBERS; do
    [ -f "$STATE/$n/pid" ] || continue; pid=$(cat "$STATE/$n/pid")
    alive "$pid" && [ "$(ps -o comm= -p "$pid")" = etcd ] && kill "$pid" 2>/dev/null || true
  done
  for n in $MEMBERS; do
    [ -f "$STATE/$n/pid" ] || continue; pid=$(cat "$STATE/$n/pid")
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.05; done
    rm -f "$STATE/$n/pid"
  done
}

case "${1:-}" in
start)
  stop
  rm -rf "$STATE"; mkdir -p "$STATE"
  cluster=
  for n in $MEMBERS; do
    mkdir -p "$STATE/$n"; free_port >"$STATE/$n/client"; free_port >"$STATE/$n/peer"
    cluster+="${cluster:+,}$n=http://127.0.0.1:$(cat "$STATE/$n/peer")"
  done
  echo "$cluster" >"$STATE/cluster"
  for n in $MEMBERS; do launch "$n"; done
  urls=
  for n in $MEMBERS; do
    c=$(cat "$STATE/$n/client")
    for _ in $(seq 1 300); do healthy "$c" && break; sleep 0.05; done
    healthy "$c" || { echo "etcd member $n did not become healthy; see $STATE/$n/etcd.log" >&2; stop; exit 1; }
    urls+="${urls:+,}http://127.0.0.1:$c"
  done
  echo "$urls" | tee "$STATE/urls" ;;
leader)
  leader ;;
kill-leader)
  for _ in $(seq 1 100); do out=$(leader) && break; sleep 0.05; done
  [ -n "${out:-}" ] || { echo "no leader" >&2; exit 1; }
  n=${out%% *}; kill -KILL "$(cat "$STATE/$n/pid")"
  pid=$(cat "$STATE/$n/pid"); while alive "$pid"; do sleep 0.02; done
  echo "$out" ;;
restart)
  n=${2:?member name}; launch "$n"
  c=$(cat "$STATE/$n/client")
  for _ in $(seq 1 300); do healthy "$c" && exit 0; sleep 0.05; done
  echo "etcd member $n did not come back; see $STATE/$n/etcd.log" >&2; exit 1 ;;
stop)
  stop ;;
*)
  sed -n 2,8p "$0" >&2; exit 2 ;;
esac
