#!/usr/bin/env bash
# Prints the instructions one iteration of a benchmark costs: cachegrind's count of the whole
# test binary at two iteration counts, differenced and divided by the difference of iterations,
# so that start-up, the warm-up and the benchmark's set-up cancel. Instruction counts do not
# depend on the machine's load, as wall time does.
#
#   ./instructions.sh PKG BENCH [LOW HIGH]
#   ./instructions.sh . '^BenchmarkAllowed$/^lib=retryafter$'            # 100000x and 300000x
#   ./instructions.sh ./grpc 'Unary/path=refused/lib=grpclimit$' 10000 30000
#
# With ANNOTATE=1 it also prints where an iteration's instructions go, function by function
# (cg_annotate of the difference of the two counts, divided by the difference of iterations).
#
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")"
pkg=$1 bench=$2 low=${3:-100000} high=${4:-300000}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/b.test" "$pkg"
count() {
	GODEBUG=cpu.rdtscp=off GOGC=off GOMAXPROCS=1 valgrind --tool=cachegrind --cache-sim=no \
		--cachegrind-out-file="$bin/cg.$1" "$bin/b.test" -test.run '^$' -test.bench "$bench" \
		-test.benchtime "${1}x" 2>&1 | sed -n 's/.*I *refs: *//p' | tr -d ,
}
a=$(count "$low") b=$(count "$high")
echo "$bench: $(((b - a) / (high - low))) instructions an iteration ($a at ${low}x, $b at ${high}x)"
if [ -n "${ANNOTATE:-}" ]; then
	cg_diff "$bin/cg.$low" "$bin/cg.$high" >"$bin/cg.diff" 2>/dev/null
	cg_annotate --show-percs=no "$bin/cg.diff" 2>/dev/null |
		awk -v n=$((high - low)) '/file:function/ { on = 1; next }
			on && NF >= 2 && $2 !~ /^</ { c = $1; gsub(",", "", c); if (c / n >= 1) printf "%8.1f %s\n", c / n, $2 }'
fi
