#!/usr/bin/env bash
# cluster.sh: idmint's HA deployment on one machine, to try it: one etcd,
# three PostgreSQL nodes run by Patroni (synchronous_mode), two idmint
# instances on the cluster's multi-host URL, all on 127.0.0.1, from this
# directory's patroni.yml, etcd.yml, post-bootstrap.sh and idmint.env (the
# files the failover drill, make drill-ha, tests). See README.md here.
#
#   deploy/ha/cluster.sh up            start it (builds idmint unless IDMINT_BIN is set)
#   deploy/ha/cluster.sh status        patronictl list, and each idmint's /id/health status
#   deploy/ha/cluster.sh load [30s]    ask both idmint instances for IDs; fails on a duplicate
#   deploy/ha/cluster.sh kill-leader   SIGKILL the leader's Patroni and PostgreSQL (a crash)
#   deploy/ha/cluster.sh start NODE    start a node's Patroni again: it rejoins as a replica
#   deploy/ha/cluster.sh down          stop everything and remove the directory
#   deploy/ha/cluster.sh smoke         up, load across kill-leader, check, down (CI)
#
# Environment: IDMINT_HA_DIR (default /tmp/idmint-ha), IDMINT_HA_PORT (first
# PostgreSQL port, default 15432; Patroni's APIs from +1000, etcd from
# -3000, idmint from +2648: 18080, 18081), SYNCHRONOUS_MODE (true),
# TTL (10), PG_BIN (the newest /usr/lib/postgresql/*/bin).
# Needs: patroni, python3-etcd, python3-psycopg2, etcd-server, postgresql,
# curl (Debian). As root, etcd and Patroni run as the user postgres.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${IDMINT_HA_DIR:-/tmp/idmint-ha}
base=${IDMINT_HA_PORT:-15432}
nodes=(node1 node2 node3)
instances=(0 1)
tag=demo

pg_port() { echo $((base + $1)); }
api_port() { echo $((base + 1000 + $1)); }
idmint_port() { echo $((base + 2648 + $1)); }
etcd_client=$((base - 3000))
etcd_peer=$((base - 2999))

die() {
	echo "cluster.sh: $*" >&2
	exit 1
}

# as_server is the prefix that runs a command as the user postgres when we
# are root (PostgreSQL refuses to run as root).
as_server=()
if ((EUID == 0)); then
	as_server=(setpriv --reuid postgres --regid postgres --init-groups --reset-env -- env PATH="$PATH" HOME="$dir")
fi

# render TEMPLATE OUT: fills in ${NAME} placeholders from the environment,
# as testkit/hacluster does; an unset one is an error.
render() {
	TEMPLATE=$1 perl -pe 's/\$\{([A-Z_][A-Z0-9_]*)\}/exists $ENV{$1} ? $ENV{$1} : die "unset placeholder $1 in $ENV{TEMPLATE}\n"/ge' "$1" >"$2.tmp"
	mv "$2.tmp" "$2"
}

# spawn NAME CMD...: runs CMD in the background, detached, logging to
# $dir/NAME.log, its pid in $dir/NAME.pid.
spawn() {
	local name=$1
	shift
	setsid "$@" >>"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
}

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

# wait_for WHAT SECONDS CMD...: polls CMD every half second, saying every
# 10 s that it still waits, so that a slow start is not taken for a hang.
wait_for() {
	local what=$1 limit=$2 i
	shift 2
	for ((i = 0; i < limit * 2; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		if ((i > 0 && i % 20 == 0)); then
			echo "still waiting for $what ($((i / 2))s of at most ${limit}s)"
		fi
		sleep 0.5
	done
	die "waited ${limit}s for $what; logs are in $dir"
}

# ports lists every port the cluster uses, as "PORT WHAT".
ports() {
	local i
	echo "$etcd_client etcd (clients)"
	echo "$etcd_peer etcd (peers)"
	for i in "${!nodes[@]}"; do
		echo "$(pg_port "$i") PostgreSQL of ${nodes[$i]}"
		echo "$(api_port "$i") Patroni API of ${nodes[$i]}"
	done
	for i in "${instances[@]}"; do
		echo "$(idmint_port "$i") idmint$i"
	done
}

# check_ports fails, before anything starts, naming each port of the cluster
# that is taken and the process holding it (from /proc: ss and lsof may be
# missing). A port is taken when 127.0.0.1 cannot be bound on it.
check_ports() {
	ports | python3 -c '
import os, socket, sys

def holders(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # Any state: a listener, or a connection using it as its local port.
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[9] != "0":
                inodes.add(f[9])
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
            for fd in fds:
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    cmd = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
                    found.append("pid %s (%s)" % (pid, " ".join(cmd.split())[:100]))
                    break
        except OSError:
            continue
    return ", ".join(found) or "a process this user cannot see"

taken = []
for line in sys.stdin:
    port, what = line.rstrip("\n").split(" ", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", int(port)))
    except OSError as e:
        taken.append("port %s (for %s) is taken: %s; held by %s" % (port, what, e.strerror, holders(int(port))))
    finally:
        s.close()
for t in taken:
    print("cluster.sh: " + t, file=sys.stderr)
if taken:
    print("cluster.sh: free them, or move the cluster with IDMINT_HA_PORT (now %s)" % sys.argv[1], file=sys.stderr)
    sys.exit(1)
' "$base"
}

http_ok() { [[ $(curl -s -o /dev/null -m 2 -w '%{http_code}' "$1") == 200 ]]; }

leader() {
	local i
	for i in "${!nodes[@]}"; do
		if http_ok "http://127.0.0.1:$(api_port "$i")/primary"; then
			echo "$i"
			return 0
		fi
	done
	return 1
}

database_url() {
	local hosts=() i
	for i in "${!nodes[@]}"; do
		hosts+=("127.0.0.1:$(pg_port "$i")")
	done
	local IFS=,
	echo "postgres://idmint:$IDMINT_DB_PASSWORD@${hosts[*]}/idmint?sslmode=disable&target_session_attrs=read-write"
}

secrets() {
	if [[ ! -f $dir/secrets.env ]]; then
		local k
		for k in SUPERUSER_PASSWORD REPLICATION_PASSWORD IDMINT_DB_PASSWORD; do
			echo "$k=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
		done >"$dir/secrets.env"
		chmod 600 "$dir/secrets.env"
	fi
	set -a
	# shellcheck disable=SC1091
	. "$dir/secrets.env"
	set +a
}

start_node() {
	local i=$1 name=${nodes[$1]}
	spawn "$name" "${as_server[@]}" env IDMINT_DB_PASSWORD="$IDMINT_DB_PASSWORD" patroni "$dir/$name/patroni.yml"
}

start_idmint() {
	local i=$1
	spawn "idmint$i" env $(grep -E '^IDMINT_[A-Z_]+=' "$here/idmint.env") \
		IDMINT_DATABASE_URL="$(database_url)" IDMINT_LISTEN="127.0.0.1:$(idmint_port "$i")" IDMINT_INSTANCE="idmint$i" IDMINT_GRPC_LISTEN=off \
		"$idmint" serve
}

cmd_up() {
	check_ports || exit 1
	command -v patroni >/dev/null || die "patroni not found (Debian: apt-get install patroni python3-etcd python3-psycopg2)"
	command -v etcd >/dev/null || die "etcd not found (Debian: apt-get install etcd-server)"
	[[ -e $dir ]] && die "$dir exists: cluster.sh down first"
	local bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
	[[ -x $bin/postgres ]] || die "no PostgreSQL server binaries (Debian: apt-get install postgresql), or set PG_BIN"
	mkdir -p "$dir"
	chmod 755 "$dir"
	secrets
	idmint=${IDMINT_BIN:-$dir/idmint}
	if [[ -z ${IDMINT_BIN:-} ]]; then
		echo "building idmint"
		(cd "$repo" && go build -o "$dir/idmint" ./cmd/idmint)
	fi

	export SCOPE=idmint HOST=127.0.0.1
	export ETCD_NAME=etcd1 ETCD_DIR=$dir/etcd ETCD_CLIENT_PORT=$etcd_client ETCD_PEER_PORT=$etcd_peer
	mkdir -p "$ETCD_DIR"
	render "$here/etcd.yml" "$ETCD_DIR/etcd.yml"
	cp "$here/post-bootstrap.sh" "$dir/post-bootstrap.sh"
	if ((EUID == 0)); then chown -R postgres: "$dir"; fi
	echo "starting etcd on 127.0.0.1:$etcd_client"
	spawn etcd "${as_server[@]}" etcd --config-file "$ETCD_DIR/etcd.yml"
	wait_for "etcd" 30 http_ok "http://127.0.0.1:$etcd_client/health"

	export ETCD_HOSTS=127.0.0.1:$etcd_client BIN_DIR=$bin CLIENT_NET=127.0.0.1/32 FSYNC=on
	export TTL=${TTL:-10} LOOP_WAIT=1 SYNCHRONOUS_MODE=${SYNCHRONOUS_MODE:-true}
	export RETRY_TIMEOUT=$((TTL / 3 > 2 ? TTL / 3 : 2)) POST_BOOTSTRAP=$dir/post-bootstrap.sh
	local i
	for i in "${!nodes[@]}"; do
		export NAME=${nodes[$i]} PG_PORT=$(pg_port "$i") API_PORT=$(api_port "$i")
		export NODE_DIR=$dir/$NAME DATA_DIR=$dir/$NAME/data
		mkdir -p "$NODE_DIR"
		render "$here/patroni.yml" "$NODE_DIR/patroni.yml"
		chmod 700 "$NODE_DIR"
		chmod 600 "$NODE_DIR/patroni.yml"
		if ((EUID == 0)); then chown -R postgres: "$NODE_DIR"; fi
		echo "starting ${nodes[$i]}: PostgreSQL on 127.0.0.1:$PG_PORT, Patroni API on $API_PORT"
		start_node "$i"
	done
	echo "waiting for a leader and its replicas (the first bootstrap takes up to a minute)"
	wait_for "a leader" 180 leader
	for i in "${!nodes[@]}"; do
		wait_for "${nodes[$i]} to run" 180 http_ok "http://127.0.0.1:$(api_port "$i")/health"
	done

	echo "migrating the database and creating the tag $tag"
	"$idmint" migrate --database-url "$(database_url)"
	"$idmint" tag create "$tag" --step 50 --max-step 50 --database-url "$(database_url)" >/dev/null
	for i in "${instances[@]}"; do
		echo "starting idmint$i on 127.0.0.1:$(idmint_port "$i")"
		start_idmint "$i"
	done
	for i in "${instances[@]}"; do
		wait_for "idmint$i" 30 http_ok "http://127.0.0.1:$(idmint_port "$i")/id?biz_tag=$tag"
	done
	cmd_status
}

cmd_status() {
	"${as_server[@]}" patronictl -c "$dir/${nodes[0]}/patroni.yml" list
	local i
	for i in "${instances[@]}"; do
		printf 'idmint%d http://127.0.0.1:%d: ' "$i" "$(idmint_port "$i")"
		curl -s -m 3 "http://127.0.0.1:$(idmint_port "$i")/id/health" | python3 -c '
import json, sys
h = json.load(sys.stdin)
r = h.get("replication", {})
print(h.get("status"), "- standbys", r.get("replicas_connected"), "sync", r.get("sync_replicas"), "timeline", r.get("timeline"))
' 2>/dev/null || echo "no answer"
	done
}

cmd_load() {
	local targets=() i
	for i in "${instances[@]}"; do
		targets+=(--target "http://127.0.0.1:$(idmint_port "$i")")
	done
	# The drill says how far it got every 5 s on stderr, its report at the end.
	echo "asking both idmint instances for IDs for ${1:-30s}" >&2
	"${IDMINT_BIN:-$dir/idmint}" drill "${targets[@]}" --biz-tag "$tag" --concurrency 8 --duration "${1:-30s}"
}

cmd_kill_leader() {
	local i
	i=$(leader) || die "no leader right now"
	local name=${nodes[$i]} pg
	pg=$(head -n 1 "$dir/$name/data/postmaster.pid")
	kill -KILL "$(pid_of "$name")" || true
	pkill -KILL -P "$pg" || true
	kill -KILL "$pg" || true
	echo "killed $name (Patroni and PostgreSQL); Patroni promotes a replica within TTL"
}

cmd_start() {
	local name=${1:?which node: ${nodes[*]}} i
	for i in "${!nodes[@]}"; do
		if [[ ${nodes[$i]} == "$name" ]]; then
			secrets
			start_node "$i"
			echo "started $name's Patroni: it rejoins as a replica (pg_rewind if needed)"
			return
		fi
	done
	die "no node $name (${nodes[*]})"
}

cmd_down() {
	[[ -d $dir ]] || return 0
	local name pid i
	for i in "${instances[@]}"; do
		pid=$(pid_of "idmint$i")
		[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
	done
	# Patroni stops its PostgreSQL on SIGTERM.
	for name in "${nodes[@]}"; do
		pid=$(pid_of "$name")
		[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
	done
	for name in "${nodes[@]}"; do
		pid=$(pid_of "$name")
		for ((i = 0; i < 60 && ${#pid} > 0; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		# A crashed node's server, or one Patroni left behind.
		if [[ -f $dir/$name/data/postmaster.pid ]]; then
			pid=$(head -n 1 "$dir/$name/data/postmaster.pid")
			if grep -qs "$dir/$name/data" "/proc/$pid/cmdline"; then
				kill -KILL "$pid" 2>/dev/null || true
			fi
		fi
	done
	pid=$(pid_of etcd)
	[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
	sleep 1
	rm -rf "$dir"
	echo "stopped; removed $dir"
}

# smoke: the walk-through of README.md, checked: load across a leader crash
# with no duplicate, and IDs from both instances after it.
cmd_smoke() {
	[[ -n ${KEEP:-} ]] || trap cmd_down EXIT
	cmd_up
	local old
	old=$(leader)
	cmd_load 30s >"$dir/load.out" 2>&1 &
	local load=$!
	sleep 8
	cmd_kill_leader
	wait_for "a new leader" 60 leader
	echo "new leader: ${nodes[$(leader)]} (was ${nodes[$old]})"
	local status=0
	wait "$load" || status=$?
	cat "$dir/load.out"
	((status == 0)) || die "the load failed (status $status)"
	cmd_status
}

case ${1:-} in
up) cmd_up ;;
status) cmd_status ;;
load) cmd_load "${2:-}" ;;
kill-leader) cmd_kill_leader ;;
start) cmd_start "${2:-}" ;;
down) cmd_down ;;
smoke) cmd_smoke ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
