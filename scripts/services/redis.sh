#!/usr/bin/env bash
# usage: scripts/services/redis.sh install|start|stop
#   start: one redis-server on 127.0.0.1 at a free port; prints redis://127.0.0.1:PORT/0
#          and writes it to $STATE/url (STATE=${FENCEPOST_STATE:-REPO/.state}/redis)
#   stop:  stops that server by the PID in its pidfile and waits until it is gone
#   TLS=1: the same, TLS only (no plain port), with the certificate of scripts/services/tls-certs.sh:
#          prints rediss://127.0.0.1:PORT/0, writes it to $STATE/url and the CA's path to $STATE/ca
#          (STATE=…/redis-tls; stop it with TLS=1 too)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TLS=${TLS:-0}
STATE=${FENCEPOST_STATE:-$REPO/.state}/redis; if [ "$TLS" = 1 ]; then STATE=$STATE-tls; fi
PIDFILE=$STATE/redis.pid

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ping() {
  local tls=(); if [ "$TLS" = 1 ]; then tls=(--tls --cacert "$CERTS/ca.pem"); fi
  [ "$(redis-cli "${tls[@]}" -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if alive "$pid" && [ "$(ps -o comm= -p "$pid")" = redis-server ]; then
    kill "$pid"
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done  # up to 10 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$PIDFILE" "$STATE/url" "$STATE/ca"
}

case "${1:-}" in
install)
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then exit 0; fi
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools ;;
start)
  stop  # a stale server from an earlier run in the same state dir
  mkdir -p "$STATE"
  scheme=redis
  if [ "$TLS" = 1 ]; then CERTS=$("$REPO/scripts/services/tls-certs.sh"); scheme=rediss; fi
  for _ in 1 2 3; do  # the free port can be taken between probe and bind: retry
    port=$(free_port)
    listen=(--port "$port")
    if [ "$TLS" = 1 ]; then
      listen=(--port 0 --tls-port "$port" --tls-cert-file "$CERTS/server.pem"
        --tls-key-file "$CERTS/server.key" --tls-ca-cert-file "$CERTS/ca.pem" --tls-auth-clients no)
    fi
    redis-server --bind 127.0.0.1 "${listen[@]}" --daemonize yes --save '' --appendonly no \
      --dir "$STATE" --pidfile "$PIDFILE" --logfile "$STATE/redis.log"
    for _ in $(seq 1 100); do ping "$port" && break; sleep 0.05; done
    if ping "$port"; then
      if [ "$TLS" = 1 ]; then echo "$CERTS/ca.pem" >"$STATE/ca"; fi
      echo "$scheme://127.0.0.1:$port/0" | tee "$STATE/url"
      exit 0
    fi
    stop
  done
  echo "redis did not start; see $STATE/redis.log" >&2; exit 1 ;;
stop)
  stop ;;
*)
  sed -n 2,7p "$0" >&2; exit 2 ;;
esac
