#!/usr/bin/env bash
# usage: scripts/services/etcd.sh install|start|stop|pause|resume
#   start:  one etcd member on 127.0.0.1 at free client and peer ports; prints http://127.0.0.1:PORT
#           and writes it to $STATE/url (STATE=${FENCEPOST_STATE:-REPO/.state}/etcd)
#   stop:   stops that member by its PID and waits until it is gone
#   pause / resume: SIGSTOP / SIGCONT the member (a black-holed server for fault tests)
#   TLS=1:  the same with an https client URL only, with the certificate of
#           scripts/services/tls-certs.sh: prints https://127.0.0.1:PORT, writes it to $STATE/url
#           and the CA's path to $STATE/ca (STATE=…/etcd-tls; stop it with TLS=1 too)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TLS=${TLS:-0}
STATE=${FENCEPOST_STATE:-$REPO/.state}/etcd; if [ "$TLS" = 1 ]; then STATE=$STATE-tls; fi
PIDFILE=$STATE/etcd.pid

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
healthy() {
  local tls=(); if [ "$TLS" = 1 ]; then tls=(--cacert "$CERTS/ca.pem"); fi
  curl -sf --max-time 1 "${tls[@]}" "$SCHEME://127.0.0.1:$1/health" | grep -q '"health":"true"'
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if alive "$pid" && [ "$(ps -o comm= -p "$pid")" = etcd ]; then
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid"
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done  # up to 10 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$PIDFILE" "$STATE/url" "$STATE/ca"
}

case "${1:-}" in
install)
  if command -v etcd >/dev/null && command -v curl >/dev/null; then exit 0; fi
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends etcd-server etcd-client curl ;;
start)
  stop
  rm -rf "$STATE"; mkdir -p "$STATE"
  SCHEME=http; tls=()
  if [ "$TLS" = 1 ]; then
    CERTS=$("$REPO/scripts/services/tls-certs.sh"); SCHEME=https
    tls=(--cert-file "$CERTS/server.pem" --key-file "$CERTS/server.key")
  fi
  for _ in 1 2 3; do  # a free port can be taken between probe and bind: retry
    c=$(free_port); p=$(free_port)
    # fast elections (heartbeat 50 ms, election 500 ms); no fsync: test data only
    nohup etcd --name s1 --data-dir "$STATE/data" \
      --listen-client-urls "$SCHEME://127.0.0.1:$c" --advertise-client-urls "$SCHEME://127.0.0.1:$c" "${tls[@]}" \
      --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
      --initial-cluster "s1=http://127.0.0.1:$p" --initial-cluster-state new \
      --heartbeat-interval=50 --election-timeout=500 --unsafe-no-fsync \
      >"$STATE/etcd.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 200); do healthy "$c" && break; alive "$(cat "$PIDFILE")" || break; sleep 0.05; done
    if healthy "$c"; then
      if [ "$TLS" = 1 ]; then echo "$CERTS/ca.pem" >"$STATE/ca"; fi
      echo "$SCHEME://127.0.0.1:$c" | tee "$STATE/url"
      exit 0
    fi
    stop; rm -rf "$STATE/data"
  done
  echo "etcd did not start; see $STATE/etcd.log" >&2; exit 1 ;;
stop)
  stop ;;
pause)
  kill -STOP "$(cat "$PIDFILE")" ;;
resume)
  kill -CONT "$(cat "$PIDFILE")" ;;
*)
  sed -n 2,9p "$0" >&2; exit 2 ;;
esac
