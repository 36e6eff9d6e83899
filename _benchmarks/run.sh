#!/usr/bin/env bash
# Runs the comparison and prints the README's Performance table (Markdown) on stdout.
# COUNT and BENCHTIME override the defaults; the raw results stay in bench.txt.
#
# The test binary runs COUNT rounds of every benchmark, rather than every benchmark COUNT times
# in a row, so that a slow spell on the machine is spread over the subjects instead of falling
# on whichever one it caught.
set -euo pipefail
cd "$(dirname "$0")"
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

# The comparison's benchmarks; the floors (BenchmarkFloor*) have a command of their own in README.md.
benchmarks='^Benchmark(Allowed|Rejected|Keys10k|Parallel1k|BytesPerKey)$'

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/compare.test" .
: > bench.txt
for _ in $(seq "${COUNT:-6}"); do
	"$bin/compare.test" -test.run '^$' -test.bench "$benchmarks" -test.benchmem -test.count 1 \
		-test.benchtime "${BENCHTIME:-500ms}" >> bench.txt
done
go run "$benchstat" -format csv -row /lib -col .name bench.txt 2>/dev/null | go run ./table -raw bench.txt
