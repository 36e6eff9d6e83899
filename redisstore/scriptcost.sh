#!/usr/bin/env bash
# scriptcost.sh measures what one decision costs Redis: the instructions redis-server executes
# per EVALSHA of the store's decision script, and of go-redis/redis_rate's, side by side in one
# run (BENCHMARKS.md has the figures). Each script is loaded into a redis-server of its own,
# started under valgrind's cachegrind on a free loopback port, and called N1 and then N2 times
# (admitting on one key at a limit it never reaches, so that every call writes the key); the
# figure is the difference of the server's instructions divided by N2 - N1, which leaves out its
# start and its shutdown. Instruction counts, unlike times, do not move with the host's load.
#
#	./scriptcost.sh          # 3 rounds
#	ROUNDS=5 ./scriptcost.sh
#
# It needs redis-server, redis-benchmark and valgrind; redis_rate v10.0.1's script is read from
# the module cache (go mod download puts it there) and nothing enters a go.mod.
set -euo pipefail
cd "$(dirname "$0")"
: "${ROUNDS:=3}" "${N1:=2000}" "${N2:=6000}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

SCRIPTS_OUT=$work go test -count=1 -run '^TestScriptSources$' . >/dev/null
rr=$(GOFLAGS=-mod=mod go mod download -json github.com/go-redis/redis_rate/v10@v10.0.1 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
python3 - "$rr/lua.go" >"$work/redis_rate.lua" <<'PY'
import re, sys
print(re.search(r'allowN = redis.NewScript\(`(.*?)`\)', open(sys.argv[1]).read(), re.S).group(1))
PY

# instructions FILE N ARGS...: the instructions of a redis-server that ran FILE N times.
instructions() {
	local file=$1 n=$2 port out pid
	shift 2
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	out=$work/cachegrind.$port
	valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>"$out" &
	pid=$!
	for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
	local sha
	sha=$(redis-cli -p "$port" script load "$(cat "$file")")
	redis-benchmark -p "$port" -n "$n" -c 1 -q evalsha "$sha" 1 k "$@" >/dev/null
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
	grep 'I *refs' "$out" | tr -d ',' | awk '{print $NF}'
}

# percall FILE ARGS...: instructions per call.
percall() {
	local a b
	a=$(instructions "$1" "$N1" "${@:2}")
	b=$(instructions "$1" "$N2" "${@:2}")
	echo $(((b - a) / (N2 - N1)))
}

echo "round redis_rate decide.lua"
for r in $(seq "$ROUNDS"); do
	# redis_rate: burst, rate, period (s), cost; the store: T (ns per token), burst, cost.
	echo "$r $(percall "$work/redis_rate.lua" 1000000 1000000 1 1) $(percall "$work/decide.lua" 1000 100000000 1)"
done
