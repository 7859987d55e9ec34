#!/usr/bin/env bash
# usage: scripts/services/zookeeper-ensemble.sh start|stop|leader|kill-leader|restart NAME
#   start:       a 3-member ZooKeeper 3.8 ensemble z1 z2 z3 on 127.0.0.1 at free ports; prints the
#                connect string (host:port,…) and writes it to $STATE/hosts
#                (STATE=${FENCEPOST_STATE:-REPO/.state}/zookeeper3)
#   leader:      prints "NAME HOST:PORT" of the member serving as leader
#   kill-leader: SIGKILLs the leader; prints "NAME HOST:PORT"
#   restart NAME: starts a killed member again with its data dir (it rejoins)
#   stop:        stops every member and waits until they are gone
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FENCEPOST_STATE:-$REPO/.state}/zookeeper3
MEMBERS="z1 z2 z3"
CLASSPATH_ZK=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-simple.jar

alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }  # a zombie counts as gone
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mode() { echo srvr | nc -N -w1 127.0.0.1 "$1" 2>/dev/null | sed -n 's/^Mode: //p'; }  # leader|follower|""

launch() {  # NAME: start one member from its saved config
  local n=$1
  nohup java -Xmx192m -cp "$CLASSPATH_ZK" org.apache.zookeeper.server.quorum.QuorumPeerMain \
    "$STATE/$n/zoo.cfg" >>"$STATE/$n/zk.log" 2>&1 </dev/null &
  echo $! >"$STATE/$n/pid"
}

leader() {
  local n c
  for n in $MEMBERS; do
    [ -f "$STATE/$n/pid" ] && alive "$(cat "$STATE/$n/pid")" || continue
    c=$(cat "$STATE/$n/client")
    [ "$(mode "$c")" = leader ] && { echo "$n 127.0.0.1:$c"; return 0; }
  done
  return 1
}

stop() {
  local n pid
  for n in $MEMBERS; do
    [ -f "$STATE/$n/pid" ] || continue; pid=$(cat "$STATE/$n/pid")
    alive "$pid" && [ "$(ps -o comm= -p "$pid")" = java ] && kill "$pid" 2>/dev/null || true
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
  servers=; i=0
  for n in $MEMBERS; do
    i=$((i + 1)); mkdir -p "$STATE/$n/data"; echo $i >"$STATE/$n/data/myid"
    free_port >"$STATE/$n/client"
    servers+="server.$i=127.0.0.1:$(free_port):$(free_port)"$'\n'
  done
  for n in $MEMBERS; do
    # tickTime 500 ms: sessions from 1 s to 30 s; followers give up on a silent leader
    # after syncLimit ticks; no fsync: test data only
    cat >"$STATE/$n/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=4
minSessionTimeout=1000
maxSessionTimeout=30000
dataDir=$STATE/$n/data
clientPort=$(cat "$STATE/$n/client")
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf
forceSync=no
$servers
CFG
  done
  for n in $MEMBERS; do launch "$n"; done
  hosts=
  # up to 60 s for the members to serve: on a busy 2-core machine three JVMs starting at
  # once are slow to elect a leader
  deadline=$((SECONDS + 60))
  for n in $MEMBERS; do
    c=$(cat "$STATE/$n/client")
    until [ -n "$(mode "$c")" ] || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.05; done
    [ -n "$(mode "$c")" ] || { echo "zookeeper member $n did not join; see $STATE/$n/zk.log" >&2; stop; exit 1; }
    hosts+="${hosts:+,}127.0.0.1:$c"
  done
  echo "$hosts" | tee "$STATE/hosts" ;;
leader)
  leader ;;
kill-leader)
  for _ in $(seq 1 200); do out=$(leader) && break; sleep 0.05; done
  [ -n "${out:-}" ] || { echo "no leader" >&2; exit 1; }
  n=${out%% *}; pid=$(cat "$STATE/$n/pid"); kill -KILL "$pid"
  while alive "$pid"; do sleep 0.02; done
  echo "$out" ;;
restart)
  n=${2:?member name}
  if [ -f "$STATE/$n/pid" ] && alive "$(cat "$STATE/$n/pid")"; then echo "member $n is running" >&2; exit 1; fi
  launch "$n"
  c=$(cat "$STATE/$n/client")
  for _ in $(seq 1 400); do [ -n "$(mode "$c")" ] && exit 0; sleep 0.05; done
  echo "zookeeper member $n did not come back; see $STATE/$n/zk.log" >&2; exit 1 ;;
stop)
  stop ;;
*)
  sed -n 2,9p "$0" >&2; exit 2 ;;
esac
