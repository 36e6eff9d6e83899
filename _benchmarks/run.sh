#!/usr/bin/env bash
# Runs the comparison and prints the README's Performance table (Markdown) on stdout.
# COUNT and BENCHTIME override the defaults; the raw results stay in bench.txt.
set -euo pipefail
cd "$(dirname "$0")"
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

go test -run '^$' -bench . -benchmem -count "${COUNT:-6}" -benchtime "${BENCHTIME:-500ms}" . > bench.txt
go run "$benchstat" -format csv -row /lib -col .name bench.txt 2>/dev/null | go run ./table -raw bench.txt
