#!/usr/bin/env bash
# mutation.sh runs the mutation test of the redisstore package (TESTING.md says what it does and
# how to read it): gremlins plants one bug at a time in the package's Go code and runs the tests
# against each. It starts a redis-server and a Redis Cluster of its own on free loopback ports
# (unless REDIS_ADDR and REDIS_CLUSTER_ADDRS name ones), and stops them when it ends.
#
#	./mutation.sh                   # the whole package: over an hour on two cores
#	./mutation.sh -o results.json   # and gremlins's results as JSON
#	./mutation.sh --dry-run         # only list the mutants and whether the tests cover them
#
# Arguments are passed to gremlins unleash. Nothing enters a go.mod: gremlins runs through go
# run, and the module is tested through a copy of its go.mod whose replace points at this
# checkout by an absolute path, since gremlins copies the module alone to a directory of its own.
set -euo pipefail

cd "$(dirname "$0")"
root=$(cd .. && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/redisstore-mutation.XXXXXX")

# stop stops the servers this script started, by the pids they wrote, and removes its files.
stop() {
	local f pid
	for f in "$work"/*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || continue
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	done
	rm -rf "$work"
}
trap stop EXIT

# freeport prints a loopback port on which nothing listens, nor 10000 above it (a cluster
# node's bus port).
freeport() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
			! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null &&
			[ ! -e "$work/redis-$p.pid" ]; then
			echo "$p"
			return
		fi
	done
	echo "mutation.sh: no free loopback port" >&2
	exit 1
}

# server starts a redis-server on a free port with more arguments, waits until it answers, and
# prints its port. A port taken meanwhile by another program costs a try.
server() {
	local port
	for _ in 1 2 3 4 5; do
		port=$(freeport)
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
			--pidfile "$work/redis-$port.pid" --logfile "$work/redis-$port.log" --dir "$work" "$@" \
			--cluster-config-file "nodes-$port.conf" >&2
		for _ in $(seq 100); do
			if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
				echo "$port"
				return
			fi
			sleep 0.1
		done
		[ -f "$work/redis-$port.pid" ] && kill "$(cat "$work/redis-$port.pid")" 2>/dev/null
		echo "mutation.sh: redis-server on port $port does not answer:" >&2
		cat "$work/redis-$port.log" >&2 || true
	done
	exit 1
}

if [ -z "${REDIS_ADDR:-}" ]; then
	port=$(server)
	export REDIS_ADDR="127.0.0.1:$port"
fi
if [ -z "${REDIS_CLUSTER_ADDRS:-}" ]; then
	# One cluster for the whole run, as .ci/run exports one: the tests would otherwise start
	# a cluster of their own for each mutant. 3 masters and 3 replicas.
	addrs=()
	for _ in 1 2 3 4 5 6; do
		port=$(server --cluster-enabled yes --cluster-node-timeout 1000 --repl-diskless-sync-delay 0)
		addrs+=("127.0.0.1:$port")
	done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$work/cluster.log"
	for _ in $(seq 300); do
		ok=1
		for a in "${addrs[@]}"; do
			p=${a##*:}
			info=$(redis-cli -p "$p" cluster info 2>/dev/null || true)
			repl=$(redis-cli -p "$p" info replication 2>/dev/null || true)
			if [[ $info != *cluster_state:ok* || $info != *cluster_slots_ok:16384* ||
				($repl == *role:slave* && $repl != *master_link_status:up*) ]]; then
				ok=0
				break
			fi
		done
		[ $ok = 1 ] && break
		sleep 0.1
	done
	[ $ok = 1 ] || {
		echo "mutation.sh: the cluster is not ok" >&2
		exit 1
	}
	export REDIS_CLUSTER_ADDRS=$(
		IFS=,
		echo "${addrs[*]}"
	)
fi

cp go.mod go.sum "$work/"
go mod edit -replace "github.com/retryafter/retryafter=$root" "$work/go.mod"

# -short skips the tests that take seconds and find no mutant that the others miss (see
# TESTING.md); -count=1 runs every mutant's tests, never a cached result; CI=true fails a test,
# rather than skipping it, when it finds no Redis. gremlins puts its copies in $work.
export GOWORK=off GOFLAGS="-modfile=$work/go.mod -short -count=1" CI=true TMPDIR="$work"
go run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0 unleash \
	--workers 1 --timeout-coefficient 3 --exclude-files '^rueidisstore/' "$@" .
