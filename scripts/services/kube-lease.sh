#!/usr/bin/env bash
# usage: scripts/services/kube-lease.sh start|stop|pause|resume
#   start:  the project's Lease API server (tests/kube/lease_server.py) on 127.0.0.1 at a free
#           port, with a random bearer token; prints http://127.0.0.1:PORT and writes it to
#           $STATE/url and the token to $STATE/token (STATE=${FENCEPOST_STATE:-REPO/.state}/kube-lease)
#   stop:   stops that server by its PID and waits until it is gone
#   pause / resume: SIGSTOP / SIGCONT the server (a black-holed API server)
# No kube-apiserver can be installed here: this server implements the coordination.k8s.io/v1
# Lease resource only (see its docstring for what it follows and its test controls).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/kube-lease
PIDFILE=$STATE/server.pid
PY=${PYTHON:-python3}

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if alive "$pid" && ps -o args= -p "$pid" | grep -q lease_server.py; then
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid"
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done  # up to 5 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$PIDFILE" "$STATE/url" "$STATE/token"
}

case "${1:-}" in
start)
  stop
  rm -rf "$STATE"; mkdir -p "$STATE"
  token=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
  echo "$token" >"$STATE/token"
  # port 0: the kernel picks a free one, which the server writes once it listens
  nohup "$PY" "$REPO/tests/kube/lease_server.py" --port 0 --token "$token" \
    --url-file "$STATE/url" >"$STATE/server.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 200); do [ -s "$STATE/url" ] && break; alive "$(cat "$PIDFILE")" || break; sleep 0.05; done
  if [ -s "$STATE/url" ]; then cat "$STATE/url"; exit 0; fi
  stop
  echo "the Lease API server did not start; see $STATE/server.log" >&2; exit 1 ;;
stop)
  stop ;;
pause)
  kill -STOP "$(cat "$PIDFILE")" ;;
resume)
  kill -CONT "$(cat "$PIDFILE")" ;;
*)
  sed -n 2,9p "$0" >&2; exit 2 ;;
esac
