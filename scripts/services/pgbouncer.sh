#!/usr/bin/env bash
# usage: scripts/services/pgbouncer.sh install|start|stop
#   install: Debian's pgbouncer unless it is there
#   start:   one PgBouncer in `pool_mode = transaction` on 127.0.0.1 at a free port, in
#            front of the PostgreSQL of scripts/services/postgres.sh (start that first);
#            prints postgresql://postgres@127.0.0.1:PORT/locks and writes it to $STATE/url
#            (STATE=${FENCEPOST_STATE:-REPO/.state}/pgbouncer). Databases: `locks` (up
#            to 4 server connections) and `locks_single` (1 server connection, which
#            makes the transaction-pooling hazards deterministic for the tests).
#   stop:    stops it by the PID in its pidfile and waits until it is gone
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROOT=${FENCEPOST_STATE:-$REPO/.state}
STATE=$ROOT/pgbouncer
PIDFILE=$STATE/pgbouncer.pid

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }  # pgbouncer refuses root
ready() { PGCONNECT_TIMEOUT=2 psql "postgresql://postgres@127.0.0.1:$1/locks" -qAtc 'SELECT 1' >/dev/null 2>&1; }

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && [ "$(ps -o comm= -p "$pid")" = pgbouncer ]; then
    kill -INT "$pid"  # immediate shutdown
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done  # up to 10 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$PIDFILE" "$STATE/url"
}

case "${1:-}" in
install)
  command -v pgbouncer >/dev/null && exit 0
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends pgbouncer ;;
start)
  stop  # a stale one from an earlier run in the same state dir
  pgport=$(cat "$ROOT/postgres/port" 2>/dev/null) \
    || { echo "no PostgreSQL in $ROOT/postgres: run scripts/services/postgres.sh start first" >&2; exit 1; }
  mkdir -p "$STATE"
  printf '"postgres" ""\n' >"$STATE/userlist.txt"
  for _ in 1 2 3; do  # the free port can be taken between probe and bind: retry
    port=$(free_port)
    cat >"$STATE/pgbouncer.ini" <<EOF
[databases]
locks = host=127.0.0.1 port=$pgport dbname=locks pool_size=4
locks_single = host=127.0.0.1 port=$pgport dbname=locks pool_size=1

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $STATE/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 4
ignore_startup_parameters = extra_float_digits,options
logfile = $STATE/pgbouncer.log
pidfile = $PIDFILE
EOF
    [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$STATE"
    as_postgres pgbouncer -d -q "$STATE/pgbouncer.ini"
    for _ in $(seq 1 100); do ready "$port" && break; sleep 0.05; done
    if ready "$port"; then
      echo "postgresql://postgres@127.0.0.1:$port/locks" | tee "$STATE/url"
      exit 0
    fi
    stop
  done
  echo "pgbouncer did not start; see $STATE/pgbouncer.log" >&2; exit 1 ;;
stop)
  stop ;;
*)
  sed -n 2p "$0" >&2; exit 2 ;;
esac
