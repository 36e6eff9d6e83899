#!/usr/bin/env bash
# The CI step of the caddy module, which the committed go.work leaves out (so that go test work
# and go vet work never compile Caddy): its vet and tests with the race detector, then a real
# Caddy built with it, serving on loopback with its admin endpoint off, against which the
# project's probe must pass through retry_after_limit, and whose retry_after_normalize must give
# an httprate upstream's Retry-After: 0 back to the client as at least 1, with a Date.
# go.mod has no replace: caddy/go.work uses this module and the root of the tree.
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

echo "-- caddy fmt --diff on every Caddyfile of README.md"
awk -v dir="$work" '/^```caddyfile$/ { n++; f = dir "/readme-" n ".Caddyfile"; next } /^```$/ { f = "" } f { print > f }' README.md
for f in "$work"/readme-*.Caddyfile; do
	"$work/caddy" fmt --diff "$f" >"$work/fmt.log" 2>&1 ||
		{ cat "$work/fmt.log"; echo "a Caddyfile of README.md is not caddy fmt clean"; exit 1; }
done

echo "-- caddy validate: a mistyped placeholder fails with the file and line"
printf 'http://127.0.0.1:1 {\n\tretry_after_limit {\n\t\trate 1/s\n\t\tburst 5\n\t\tkey {client_addr}\n\t}\n\trespond "hello"\n}\n' >"$work/Mistyped"
if "$work/caddy" validate --config "$work/Mistyped" --adapter caddyfile >"$work/validate.log" 2>&1; then
	echo "caddy validate passed a key of {client_addr}"; cat "$work/validate.log"; exit 1
fi
grep -q 'unrecognized placeholder {client_addr}, at .*Mistyped:5' "$work/validate.log" ||
	{ echo "caddy validate did not name the placeholder at Mistyped:5:"; cat "$work/validate.log"; exit 1; }

echo "-- reloads, an empty key and maintenance, on a Caddy with its admin endpoint on loopback"
admin_port=$("$work/smoke" port)
site_port=$("$work/smoke" port)
other_port=$("$work/smoke" port)
# reloaded NAME OTHER_RATE BURST [MAINTENANCE_UNTIL]: the Caddyfile of this step.
reloaded() {
	local down=""
	if [ -n "${3:-}" ]; then
		down="retry_after_limit /down {
		maintenance $3
	}"
	fi
	cat <<CADDYFILE
{
	admin 127.0.0.1:$admin_port
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	skip_install_trust
	grace_period 1s
}

http://127.0.0.1:$site_port {
	retry_after_limit /limited {
		name limited
		rate 1/h
		burst $2
	}
	retry_after_limit /keyed {
		rate 1/h
		burst 1
		key {header.X-Api-Key}
	}
	retry_after_limit /switched {
		maintenance_switch ops
	}
	$down
	respond "hello"
}

http://127.0.0.1:$other_port {
	retry_after_limit {
		rate $1
		burst 5
	}
	respond "other"
}
CADDYFILE
}
status() { curl -s -o /dev/null --max-time 10 -w '%{http_code}' "$@"; }
statuses() { local url=$1 n=$2 out=""; shift 2; for _ in $(seq "$n"); do out+="$(status "$@" "$url") "; done; echo "$out"; }
reload() {
	"$work/caddy" reload --config "$work/Reloaded" --adapter caddyfile --address "127.0.0.1:$admin_port" >>"$work/reload.log" 2>&1 ||
		{ echo "caddy reload failed:"; cat "$work/reload.log" "$work/caddy2.log"; exit 1; }
}
reloaded 1/s 2 >"$work/Reloaded"
"$work/caddy" run --config "$work/Reloaded" --adapter caddyfile >"$work/caddy2.log" 2>&1 &
caddy2_pid=$!
pids+=("$caddy2_pid")
for _ in $(seq 300); do
	(exec 3<>"/dev/tcp/127.0.0.1/$site_port") 2>/dev/null && break
	kill -0 "$caddy2_pid" 2>/dev/null || { echo "Caddy did not start:"; cat "$work/caddy2.log"; exit 1; }
	sleep 0.1
done
limited="http://127.0.0.1:$site_port/limited"
got=$(statuses "$limited" 3)
[ "$got" = "200 200 429 " ] || { echo "burst 2: $got, want 200 200 429"; exit 1; }
reloaded 2/s 2 >"$work/Reloaded"; reload
got=$(statuses "$limited" 1)
[ "$got" = "429 " ] || { echo "after a reload of another site's rate, the client at its limit got $got, want 429"; exit 1; }
reloaded 2/s 4 >"$work/Reloaded"; reload
got=$(statuses "$limited" 1)
[ "$got" = "429 " ] || { echo "after a reload raising the burst to 4, the client at its limit got $got, want 429 (it keeps its tokens)"; exit 1; }
got=$(statuses "$limited" 5 --interface 127.0.0.2)
[ "$got" = "200 200 200 200 429 " ] || { echo "after the raise to 4, a new client got $got, want 4 admitted"; exit 1; }
echo "counts kept across two reloads: the client at its limit stayed refused, a new one got the new burst of 4"

keyed="http://127.0.0.1:$site_port/keyed"
got=$(statuses "$keyed" 100 -H 'X-Api-Key;')
case "$got" in *500*) echo "an empty key got a 500"; exit 1 ;; esac
lines=$(grep -c 'retry_after_limit' "$work/caddy2.log" || true)
[ "$lines" -le 2 ] || { echo "100 requests with an empty key wrote $lines log lines:"; cat "$work/caddy2.log"; exit 1; }
echo "100 requests with an empty key: no 500, $lines log lines of the module"

until=$(date -u -d '+5 seconds' +%Y-%m-%dT%H:%M:%SZ)
reloaded 2/s 4 "$until" >"$work/Reloaded"; reload
down="http://127.0.0.1:$site_port/down"
wait_s=$(curl -s -o /dev/null --max-time 10 -D - "$down" | tr -d '\r' | awk -F': ' 'tolower($1) == "retry-after" { print $2 }')
case "$wait_s" in
[1-5]) ;;
*) echo "maintenance until $until: Retry-After '$wait_s', want 1 to 5 seconds (did the reload take longer?)"; exit 1 ;;
esac
sleep "$wait_s"
got=$(statuses "$down" 1)
[ "$got" = "200 " ] || { echo "maintenance until $until: after its Retry-After of $wait_s s the client got $got, want 200"; exit 1; }
echo "maintenance until $until ended on time: admitted after Retry-After: $wait_s"

switched="http://127.0.0.1:$site_port/switched"
switch="http://127.0.0.1:$admin_port/retry-after/maintenance/ops"
got="$(statuses "$switched" 1)$(status -X POST -d '{}' "$switch") $(statuses "$switched" 1)$(status -X DELETE "$switch") $(statuses "$switched" 1)"
[ "$got" = "200 200 503 200 200 " ] ||
	{ echo "the maintenance switch, off, POST, on, DELETE, off: $got, want 200 200 503 200 200"; cat "$work/caddy2.log"; exit 1; }
echo "the admin endpoint switched maintenance on and off without a reload"

kill "$caddy2_pid"
for _ in $(seq 100); do kill -0 "$caddy2_pid" 2>/dev/null || break; sleep 0.1; done
if grep -q 'WARNING: DATA RACE' "$work/caddy2.log"; then
	echo "the race detector found a data race in Caddy:"; cat "$work/caddy2.log"; exit 1
fi
echo "caddy: passed"
