#!/usr/bin/env bash
# Checks crash-tolerant-test against test binaries that die the way the emulator makes them die
# (a signal or a runtime throw, with no test failing) and against tests that really fail: it
# must pass the first and fail the second, whatever the order. Runs natively in a few seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mod=$(mktemp -d)
trap 'rm -rf "$mod"' EXIT
cd "$mod"
printf 'module scratch\n\ngo 1.26\n' >go.mod

# pkg NAME BODY: a package with one test file, whose tests see $MARKS to count their runs.
pkg() {
	mkdir -p "$1"
	cat >"$1/x_test.go" <<SRC
package $1

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
)

var _ = debug.SetTraceback

// runs counts how often the named test has started, over all runs of the binary.
func runs(name string) int {
	dir := filepath.Join(os.Getenv("MARKS"), "$1", name)
	os.MkdirAll(dir, 0o755)
	n, _ := os.ReadDir(dir)
	os.WriteFile(filepath.Join(dir, string(rune('a'+len(n)))), nil, 0o644)
	return len(n) + 1
}

// die ends the binary as the emulator does: by a signal the runtime cannot survive.
func die() { syscall.Kill(os.Getpid(), syscall.SIGSEGV); select {} }

func TestBefore(t *testing.T) { runs("before") }
$2
func TestAfter(t *testing.T) { runs("after") }
SRC
}

pkg passes ''
pkg fails 'func TestFails(t *testing.T) { t.Error("a real failure") }'
pkg crashonce 'func TestCrash(t *testing.T) { if runs("crash") == 1 { die() } }'
pkg crashtwice 'func TestCrash(t *testing.T) { if runs("crash") <= 2 { die() } }'
pkg throwonce 'func TestThrow(t *testing.T) { if runs("throw") == 1 { m := map[int]int{}; go func() { for { m[1]++ } }(); for { m[2]++ } } }'
pkg crashalways 'func TestCrash(t *testing.T) { runs("crash"); die() }'
pkg panicsonce 'func TestPanic(t *testing.T) { if runs("panic") == 1 { done := make(chan int); go func() { panic("boom") }(); <-done } }'
pkg panicsalways 'func TestPanic(t *testing.T) { runs("panic"); done := make(chan int); go func() { panic("boom") }(); <-done }'
pkg failsaftercrash 'func TestCrash(t *testing.T) { if runs("crash") == 1 { die() } }
func TestFails(t *testing.T) { t.Error("a real failure") }'
mkdir -p nobuild && printf 'package nobuild\n\nimport "testing"\n\nfunc TestX(t *testing.T) { undefined() }\n' >nobuild/x_test.go

bad=0
# expect STATUS PACKAGE: crash-tolerant-test's exit status for that package alone.
expect() {
	export MARKS="$mod/marks-$2"
	set +e
	"$here/crash-tolerant-test" -count=1 -- "./$2" >"$mod/$2.log" 2>&1
	got=$?
	set -e
	if [ "$got" -ne "$1" ]; then
		echo "FAIL: crash-tolerant-test on $2 exited $got, want $1:"; sed 's/^/    /' "$mod/$2.log"; bad=1
	fi
}
# ran PACKAGE TEST N: the test started N times.
ran() {
	got=$(ls "$mod/marks-$1/$1/$2" 2>/dev/null | wc -l)
	if [ "$got" -ne "$3" ]; then echo "FAIL: $1's $2 ran $got times, want $3"; bad=1; fi
}

expect 0 passes; ran passes before 1; ran passes after 1
expect 1 fails
expect 0 crashonce; ran crashonce before 1; ran crashonce crash 2; ran crashonce after 1
expect 0 crashtwice; ran crashtwice crash 3; ran crashtwice after 1
expect 0 throwonce; ran throwonce throw 2; ran throwonce after 1
expect 0 crashalways; ran crashalways crash 3; ran crashalways after 1
expect 0 panicsonce; ran panicsonce panic 2; ran panicsonce after 1
expect 1 panicsalways; ran panicsalways panic 2
expect 1 failsaftercrash
expect 1 nobuild
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "crash-tolerant-test: 10 cases as expected"
