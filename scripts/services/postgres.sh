#!/usr/bin/env bash
# usage: scripts/services/postgres.sh install|start|stop
#   install: Debian's PostgreSQL 15 unless /usr/lib/postgresql/15/bin/postgres is there
#   start:   one PostgreSQL 15 on 127.0.0.1 at a free port (trust auth, database `locks`);
#            prints postgresql://postgres@127.0.0.1:PORT/locks and writes it to $STATE/url
#            (STATE=${FENCEPOST_STATE:-REPO/.state}/postgres). The data dir and port are
#            kept across stop/start in the same state dir: `stop; start` is a restart of
#            the same server (the tests use it), and the port is reused if still free.
#   stop:    stops that server by the PID in its postmaster.pid (fast shutdown) and waits
#            until it is gone; keeps the data dir
#   TLS=1:   the same with ssl=on and TLS connections only (pg_hba: hostssl), with the
#            certificate of scripts/services/tls-certs.sh: prints
#            postgresql://postgres@127.0.0.1:PORT/locks?sslmode=verify-full, writes it to
#            $STATE/url and the CA's path to $STATE/ca (STATE=…/postgres-tls; stop it with TLS=1 too)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TLS=${TLS:-0}
STATE=${FENCEPOST_STATE:-$REPO/.state}/postgres; if [ "$TLS" = 1 ]; then STATE=$STATE-tls; fi
PGBIN=/usr/lib/postgresql/15/bin
DATA=$STATE/data

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }  # PostgreSQL refuses root
ready() { "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$1" -d postgres -U postgres; }

stop() {
  [ -f "$DATA/postmaster.pid" ] || return 0
  local pid; pid=$(head -n 1 "$DATA/postmaster.pid")
  if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && [ "$(ps -o comm= -p "$pid")" = postgres ]; then
    kill -INT "$pid"  # fast shutdown: roll back open transactions, end sessions, checkpoint
    for _ in $(seq 1 300); do alive "$pid" || break; sleep 0.05; done  # up to 15 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$DATA/postmaster.pid" "$STATE/url" "$STATE/ca"
}

case "${1:-}" in
install)
  [ -x $PGBIN/postgres ] && exit 0
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql-15 ;;
start)
  stop  # a stale server from an earlier run in the same state dir
  cd /tmp  # the working directory must be readable by user postgres
  mkdir -p "$STATE"
  if [ "$(id -u)" = 0 ]; then
    chmod o+x "$(dirname "$STATE")"  # user postgres must pass through the state root (mktemp makes it 0700)
    chown postgres:postgres "$STATE"
    runuser -u postgres -- test -x "$STATE" \
      || { echo "user postgres cannot reach $STATE: make its parent directories traversable (o+x)" >&2; exit 1; }
  fi
  if [ ! -f "$DATA/PG_VERSION" ]; then
    as_postgres "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 \
      --locale=C.UTF-8 --no-sync >"$STATE/initdb.log"
  fi
  opts="-c listen_addresses=127.0.0.1 -k $STATE -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  url_query=
  if [ "$TLS" = 1 ]; then
    CERTS=$("$REPO/scripts/services/tls-certs.sh")
    # the server reads its key only if its own user owns it and nobody else can read it
    install -m 600 "$CERTS/server.key" "$STATE/server.key"
    install -m 644 "$CERTS/server.pem" "$STATE/server.pem"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$STATE/server.key" "$STATE/server.pem"; fi
    printf '%s\n' 'local all all trust' 'hostssl all all 127.0.0.1/32 trust' >"$STATE/pg_hba.conf"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$STATE/pg_hba.conf"; fi
    opts="$opts -c ssl=on -c ssl_cert_file=$STATE/server.pem -c ssl_key_file=$STATE/server.key -c hba_file=$STATE/pg_hba.conf"
    url_query="?sslmode=verify-full"
  fi
  port=$(cat "$STATE/port" 2>/dev/null || true)
  for _ in 1 2 3; do  # the free port can be taken between probe and bind: retry
    [ -n "$port" ] || port=$(free_port)
    if as_postgres "$PGBIN/pg_ctl" -D "$DATA" -l "$STATE/server.log" -w -t 30 -o "-p $port $opts" start >/dev/null \
       && ready "$port"; then
      echo "$port" >"$STATE/port"
      sql() { PGSSLMODE=$([ "$TLS" = 1 ] && echo require || echo prefer) PGUSER=postgres psql -h 127.0.0.1 -p "$port" -d postgres -qAtc "$1"; }
      [ "$(sql "SELECT 1 FROM pg_database WHERE datname = 'locks'")" = 1 ] || sql 'CREATE DATABASE locks'
      if [ "$TLS" = 1 ]; then echo "$CERTS/ca.pem" >"$STATE/ca"; fi
      echo "postgresql://postgres@127.0.0.1:$port/locks$url_query" | tee "$STATE/url"
      exit 0
    fi
    stop; port=
  done
  echo "postgres did not start; see $STATE/server.log" >&2; exit 1 ;;
stop)
  stop ;;
*)
  sed -n 2,15p "$0" >&2; exit 2 ;;
esac
