#!/usr/bin/env bash
# usage: scripts/services/redis-replica.sh start|stop|hold|resume|promote|kill-primary|status
#   start:        a Redis primary and one replica on 127.0.0.1 at free ports, the replica fed through
#                 a small link proxy (so replication can be held back); prints the primary's URL and
#                 the replica's, space-separated, and writes them to $STATE/primary and $STATE/replica
#                 (STATE=${FENCEPOST_STATE:-REPO/.state}/redis-replica)
#   hold:         the link stops carrying the replication stream (the replica falls behind, WAIT
#                 counts it no more); resume: it carries it again
#   promote:      REPLICAOF NO ONE on the replica (it serves writes from its own, possibly older, data)
#   kill-primary: SIGKILLs the primary; status: prints the replica's master_link_status and offsets
#   stop:         stops the servers and the proxy by the PIDs in their pidfiles
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/redis-replica

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }
cli() { redis-cli -h 127.0.0.1 -p "$(cat "$STATE/$1.port")" "${@:2}"; }

stop_pid() {  # NAME COMM: stops the process in $STATE/NAME.pid if it is still COMM
  local f=$STATE/$1.pid pid
  # a redis-server removes its pidfile as it exits: gone between the check and the read
  pid=$(cat "$f" 2>/dev/null) || return 0
  if alive "$pid" && [[ $(ps -o comm= -p "$pid") == "$2"* ]]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done  # up to 10 s
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$f"
}

stop() {
  stop_pid replica redis-server
  stop_pid proxy python3
  stop_pid primary redis-server
  rm -f "$STATE/primary" "$STATE/replica" "$STATE/held"
}

# The link proxy: forwards the replica's connection to the primary, byte for byte; while
# $STATE/held exists it stops reading from the primary, so the replication stream waits in
# the primary's output buffer instead of reaching the replica.
PROXY='
import os, selectors, socket, sys, time
listen_port, upstream_port, held = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
server = socket.create_server(("127.0.0.1", listen_port))
sel = selectors.DefaultSelector()
sel.register(server, selectors.EVENT_READ)
peer = {}
while True:
    for key, _ in sel.select(timeout=0.01):
        s = key.fileobj
        if s is server:
            down, _ = server.accept()
            up = socket.create_connection(("127.0.0.1", upstream_port))
            peer[down], peer[up] = up, down
            sel.register(down, selectors.EVENT_READ, "down")
            sel.register(up, selectors.EVENT_READ, "up")
            continue
        if key.data == "up" and os.path.exists(held):
            continue
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        other = peer.get(s)
        if not data or other is None:
            for x in (s, other):
                if x is not None and x in peer:
                    sel.unregister(x); peer.pop(x, None); x.close()
            continue
        other.sendall(data)
    if os.path.exists(held):
        time.sleep(0.01)  # the primary side is skipped: do not spin on it
'

launch() {  # NAME PORT [redis-server args…]
  local n=$1 port=$2
  redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --save '' --appendonly no \
    --dir "$STATE" --dbfilename "$n.rdb" --pidfile "$STATE/$n.pid" --logfile "$STATE/$n.log" "${@:3}"
  echo "$port" >"$STATE/$n.port"
  for _ in $(seq 1 100); do ping "$port" && return 0; sleep 0.05; done
  return 1
}

case "${1:-}" in
start)
  stop  # a stale pair from an earlier run in the same state dir
  mkdir -p "$STATE"
  ok=
  for _ in 1 2 3; do  # a free port can be taken between probe and bind: retry
    p=$(free_port); q=$(free_port); r=$(free_port)
    launch primary "$p" || { stop; continue; }
    nohup python3 -c "$PROXY" "$q" "$p" "$STATE/held" >"$STATE/proxy.log" 2>&1 </dev/null &
    echo $! >"$STATE/proxy.pid"; echo "$q" >"$STATE/proxy.port"
    for _ in $(seq 1 100); do (echo >"/dev/tcp/127.0.0.1/$q") 2>/dev/null && break; sleep 0.05; done
    launch replica "$r" --replicaof 127.0.0.1 "$q" || { stop; continue; }
    for _ in $(seq 1 200); do
      cli replica info replication | grep -q '^master_link_status:up' && { ok=1; break; }
      sleep 0.05
    done
    [ -n "$ok" ] && break
    stop
  done
  [ -n "$ok" ] || { echo "redis primary + replica did not start; see $STATE/*.log" >&2; exit 1; }
  echo "redis://127.0.0.1:$(cat "$STATE/primary.port")/0" >"$STATE/primary"
  echo "redis://127.0.0.1:$(cat "$STATE/replica.port")/0" >"$STATE/replica"
  echo "$(cat "$STATE/primary") $(cat "$STATE/replica")" ;;
hold)
  touch "$STATE/held" ;;
resume)
  rm -f "$STATE/held" ;;
promote)
  cli replica replicaof no one >/dev/null
  for _ in $(seq 1 100); do cli replica info replication | grep -q '^role:master' && exit 0; sleep 0.02; done
  echo "the replica did not become a primary" >&2; exit 1 ;;
kill-primary)
  pid=$(cat "$STATE/primary.pid")
  kill -KILL "$pid"; while alive "$pid"; do sleep 0.02; done
  rm -f "$STATE/primary.pid" ;;
status)
  cli replica info replication | grep -E '^(role|master_link_status|slave_repl_offset|master_repl_offset):' | tr -d '\r' ;;
stop)
  stop ;;
*)
  sed -n 2,11p "$0" >&2; exit 2 ;;
esac
