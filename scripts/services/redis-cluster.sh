#!/usr/bin/env bash
# usage: scripts/services/redis-cluster.sh start|stop|nodes
#   start: a Redis Cluster of three masters (no replicas) on 127.0.0.1 at free ports, slots
#          assigned by `redis-cli --cluster create`; prints the nodes' host:port, comma-separated,
#          and writes them to $STATE/nodes (STATE=${FENCEPOST_STATE:-REPO/.state}/redis-cluster)
#   nodes: prints $STATE/nodes
#   stop:  stops every node by the PID in its pidfile and waits until it is gone
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/redis-cluster
NODES="m1 m2 m3"

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

stop() {
  local n pid pids=()
  # every PID read before any is stopped: a redis-server removes its pidfile as it exits
  for n in $NODES; do
    pid=$(cat "$STATE/$n.pid" 2>/dev/null) || continue
    pids+=("$pid")
    alive "$pid" && [ "$(ps -o comm= -p "$pid")" = redis-server ] && kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.05; done
  done
  for n in $NODES; do rm -f "$STATE/$n.pid"; done
  rm -f "$STATE/nodes"
}

case "${1:-}" in
start)
  stop
  rm -rf "$STATE"; mkdir -p "$STATE"
  addrs=()
  for n in $NODES; do
    port=$(free_port); bus=$(free_port)  # the bus port given explicitly: port + 10000 may not exist
    redis-server --bind 127.0.0.1 --port "$port" --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file "$STATE/$n.conf" --cluster-node-timeout 2000 \
      --daemonize yes --save '' --appendonly no --dir "$STATE" --dbfilename "$n.rdb" \
      --pidfile "$STATE/$n.pid" --logfile "$STATE/$n.log"
    for _ in $(seq 1 100); do ping "$port" && break; sleep 0.05; done
    ping "$port" || { echo "cluster node $n did not start; see $STATE/$n.log" >&2; stop; exit 1; }
    addrs+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$STATE/create.log" 2>&1 \
    || { echo "redis-cli --cluster create failed; see $STATE/create.log" >&2; stop; exit 1; }
  first=${addrs[0]#*:}
  for _ in $(seq 1 200); do
    redis-cli -h 127.0.0.1 -p "$first" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
    sleep 0.05
  done
  redis-cli -h 127.0.0.1 -p "$first" cluster info | grep -q '^cluster_state:ok' \
    || { echo "the cluster did not reach cluster_state:ok" >&2; stop; exit 1; }
  (IFS=,; echo "${addrs[*]}") | tee "$STATE/nodes" ;;
nodes)
  cat "$STATE/nodes" ;;
stop)
  stop ;;
*)
  sed -n 2,7p "$0" >&2; exit 2 ;;
esac
