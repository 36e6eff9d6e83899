#!/usr/bin/env bash
# The CI step of the caddy module, which the committed go.work leaves out (so that go test work
# and go vet work never compile Caddy): its vet and tests with the race detector, then a real
# Caddy built with it, serving on loopback with its admin endpoint off, against which the
# project's probe must pass through retry_after_limit, and whose retry_after_normalize must give
# an httprate upstream's Retry-After: 0 back to the client as at least 1, with a Date.
# .ci/run calls it; it also runs by itself: bash caddy/ci.sh
set -euo pipefail
cd "$(dirname "$0")"

work=$(mktemp -d)
pids=()
stop_all() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	done
	rm -rf "$work"
}
trap stop_all EXIT

echo "-- go vet and go test -race (the caddy module)"
# -race for vet too, so that it reads the export data of the race build the tests make, rather
# than compiling Caddy's modules a third time.
go vet -race ./...
go test -race -count=1 ./...

echo "-- build Caddy with the module (caddy/cmd/caddy: Caddy's standard modules and this one)"
# With the race detector, as the tests were: the build reuses every package they compiled, where
# a plain build would compile Caddy's modules once more (a third of this step's time on a cold
# cache), and a data race in the handlers under the probe's requests fails the step.
start=$SECONDS
go build -race -o "$work/caddy" ./cmd/caddy
go build -o "$work/smoke" ./internal/smoke
"$work/caddy" version
"$work/caddy" list-modules | grep -x -e 'http.handlers.retry_after_limit' -e 'http.handlers.retry_after_normalize'
echo "built in $((SECONDS - start)) s"

# Caddy's data and configuration folders, kept inside this step's folder.
export XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/config"

"$work/smoke" upstream -addr-file "$work/upstream.addr" -for 10m &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/upstream.addr" ] && break; sleep 0.1; done
upstream=$(cat "$work/upstream.addr")
limit_port=$("$work/smoke" port)
normalize_port=$("$work/smoke" port)

cat > "$work/Caddyfile" <<CADDYFILE
{
	admin off
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	skip_install_trust
}

http://127.0.0.1:$limit_port {
	retry_after_limit {
		rate  12/m
		burst 3
		rate_limit_fields
	}
	respond "hello"
}

http://127.0.0.1:$normalize_port {
	retry_after_normalize
	reverse_proxy $upstream
}
CADDYFILE
"$work/caddy" run --config "$work/Caddyfile" --adapter caddyfile >"$work/caddy.log" 2>&1 &
caddy_pid=$!
pids+=("$caddy_pid")
up=0
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$limit_port") 2>/dev/null &&
		(exec 3<>"/dev/tcp/127.0.0.1/$normalize_port") 2>/dev/null; then
		up=1
		break
	fi
	kill -0 "$caddy_pid" 2>/dev/null || break
	sleep 0.1
done
if [ "$up" -ne 1 ]; then
	echo "Caddy did not start:"; cat "$work/caddy.log"; exit 1
fi
echo "Caddy (pid $caddy_pid) serves retry_after_limit on 127.0.0.1:$limit_port and retry_after_normalize on 127.0.0.1:$normalize_port, in front of httprate on $upstream"

echo "-- retryafter-check through retry_after_limit"
if ! (cd .. && go run ./cmd/retryafter-check -timeout 90s "http://127.0.0.1:$limit_port/"); then
	echo "the probe failed; Caddy's log:"; cat "$work/caddy.log"; exit 1
fi

echo "-- retry_after_normalize in front of reverse_proxy to httprate's Retry-After: 0"
if ! "$work/smoke" repaired "http://$upstream/" "http://127.0.0.1:$normalize_port/"; then
	echo "Caddy's log:"; cat "$work/caddy.log"; exit 1
fi

kill "$caddy_pid"
for _ in $(seq 100); do kill -0 "$caddy_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$caddy_pid" 2>/dev/null; then
	echo "Caddy did not stop on SIGTERM"; exit 1
fi
if grep -q 'WARNING: DATA RACE' "$work/caddy.log"; then
	echo "the race detector found a data race in Caddy:"; cat "$work/caddy.log"; exit 1
fi
echo "caddy: passed"
