#!/usr/bin/env bash
# Runs the floor benchmarks (BenchmarkFloor*) with the bare handler's, the baseline's and
# retryafter's allowed and rejected paths, COUNT rounds (default 10) of BENCHTIME each (500ms),
# and prints benchstat's medians of CPU time per call. The raw results stay in floor.txt.
set -euo pipefail
cd "$(dirname "$0")"
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/floor.test" .
: > floor.txt
for _ in $(seq "${COUNT:-10}"); do
	"$bin/floor.test" -test.run '^$' -test.bench Floor -test.benchtime "${BENCHTIME:-500ms}" >> floor.txt
	"$bin/floor.test" -test.run '^$' -test.bench '^Benchmark(Allowed|Rejected)$/^lib=(bare|baseline|retryafter)$' \
		-test.benchmem -test.benchtime "${BENCHTIME:-500ms}" >> floor.txt
done
go run "$benchstat" -filter '.unit:cpu-sec/op' floor.txt
