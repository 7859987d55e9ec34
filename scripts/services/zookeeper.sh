#!/usr/bin/env bash
# usage: scripts/services/zookeeper.sh install|start|stop|pause|resume
#   start:  one ZooKeeper 3.8 server (standalone) on 127.0.0.1 at a free client port; prints
#           127.0.0.1:PORT and writes it to $STATE/hosts (STATE=${FENCEPOST_STATE:-REPO/.state}/zookeeper)
#   stop:   stops that server by its PID and waits until it is gone
#   pause / resume: SIGSTOP / SIGCONT the server (a black-holed server for fault tests)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/zookeeper
PIDFILE=$STATE/zk.pid
CLASSPATH_ZK=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-simple.jar

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ready() { [ "$(echo ruok | nc -N -w1 127.0.0.1 "$1" 2>/dev/null)" = imok ]; }

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if alive "$pid" && [ "$(ps -o comm= -p "$pid")" = java ]; then
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid"
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done  # up to 10 s
    if alive "$pid"; then kill -9 "$pid"; while alive "$pid"; do sleep 0.05; done; fi
  fi
  rm -f "$PIDFILE" "$STATE/hosts"
}

case "${1:-}" in
install)
  if [ -f /usr/share/java/zookeeper.jar ] && command -v nc >/dev/null; then exit 0; fi
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends zookeeper netcat-openbsd ;;
start)
  stop
  rm -rf "$STATE"; mkdir -p "$STATE/data"
  for _ in 1 2 3; do  # a free port can be taken between probe and bind: retry
    c=$(free_port)
    # tickTime 500 ms: sessions from 1 s (2 ticks) to 30 s; no fsync: test data only
    cat >"$STATE/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=30000
dataDir=$STATE/data
clientPort=$c
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf
forceSync=no
CFG
    # the server class directly: zkServer.sh would open JMX on every interface
    nohup java -Xmx256m -cp "$CLASSPATH_ZK" org.apache.zookeeper.server.ZooKeeperServerMain \
      "$STATE/zoo.cfg" >"$STATE/zk.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 400); do ready "$c" && break; alive "$(cat "$PIDFILE")" || break; sleep 0.05; done
    if ready "$c"; then
      echo "127.0.0.1:$c" | tee "$STATE/hosts"
      exit 0
    fi
    stop; rm -rf "$STATE/data"; mkdir -p "$STATE/data"
  done
  echo "zookeeper did not start; see $STATE/zk.log" >&2; exit 1 ;;
stop)
  stop ;;
pause)
  kill -STOP "$(cat "$PIDFILE")" ;;
resume)
  kill -CONT "$(cat "$PIDFILE")" ;;
*)
  sed -n 2,6p "$0" >&2; exit 2 ;;
esac
