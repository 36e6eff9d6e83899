#!/usr/bin/env bash
# Usage: ./pairs.sh BENCH A B
#
# Runs ROUNDS rounds (default 16) of the benchmarks BENCH matches, BENCHTIME each (500ms), from
# a test binary built once, and prints the ratio of subject A's time per request to subject B's
# in each round (subjects are named by lib=), with both wall times, then the median and
# quartiles of the ratios, for wall time and CPU time. Both subjects of a ratio ran in the same
# round, one right after the other, so a slow spell of the machine falls on both: this is how
# README.md's interleaved rounds are measured. For example:
#
#	./pairs.sh 'HotKey/lib=(baseline|retryafter)$' retryafter baseline
set -euo pipefail
cd "$(dirname "$0")"
if [ $# -ne 3 ]; then
	sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi
bench=$1 a=$2 b=$3

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/pairs.test" .
for round in $(seq "${ROUNDS:-16}"); do
	"$bin/pairs.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${BENCHTIME:-500ms}" |
		awk -v a="$a" -v b="$b" -v round="$round" '
			$1 ~ /^Benchmark/ && $4 == "ns/op" && $6 == "cpu-ns/op" {
				lib = $1
				sub(/.*\/lib=/, "", lib)
				sub(/-[0-9]+$/, "", lib)
				if (lib in wall) {
					# Names match per level, unanchored: keys=10000 matches keys=100000 too.
					print "pairs.sh: " $1 " is a second benchmark of " lib ": anchor BENCH (keys=10000$)" > "/dev/stderr"
					twice = 1
					exit 1
				}
				wall[lib] = $3
				cpu[lib] = $5
			}
			END {
				if (twice) {
					exit 1
				}
				if (!(a in wall) || !(b in wall)) {
					print "pairs.sh: round " round " did not run both " a " and " b > "/dev/stderr"
					exit 1
				}
				printf "round %d: wall %.3f cpu %.3f (%s %s ns, %s %s ns)\n", round, wall[a] / wall[b], cpu[a] / cpu[b],
					a, wall[a], b, wall[b]
			}'
done | tee "$bin/ratios" >&2
for column in wall cpu; do
	awk -v column="$column" '{ print $(column == "wall" ? 4 : 6) }' "$bin/ratios" | sort -g |
		awk -v column="$column" '
			{ x[NR] = $1 }
			# The p-quantile, interpolated between the nearest ranks.
			function q(p,   r, i) {
				r = 1 + p * (NR - 1)
				i = int(r)
				return i >= NR ? x[NR] : x[i] + (r - i) * (x[i + 1] - x[i])
			}
			END {
				printf "%s: median %.3f, quartiles %.3f-%.3f, range %.3f-%.3f, %d rounds\n",
					column, q(0.5), q(0.25), q(0.75), x[1], x[NR], NR
			}'
done
