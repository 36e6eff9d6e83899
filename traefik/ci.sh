#!/usr/bin/env bash
# The CI step of the traefik module, which the committed go.work leaves out (so that go test work
# never compiles Yaegi): its vet and tests with the race detector, which interpret the plugins
# with Yaegi v0.16.1 as Traefik does; then a real Traefik v3.6.12, built from the Go module proxy
# in a scratch module, with both plugins loaded as local plugins, serving on loopback:
#   - retryAfterNormalize turns go-chi/httprate's Retry-After: 0 into 1 with a Date, a UTC date
#     into delay-seconds, and gives a bare 503 the fallback; Traefik's router without it passes
#     each on as it is; Python urllib3's Retry and curl --retry get through on their first retry
#     with it and fail without it; each repair is a line of Traefik's debug log;
#   - retryAfterMaintenance answers 503 with Retry-After, and the project's probe passes it.
# .ci/run calls it; it also runs by itself: bash traefik/ci.sh
set -euo pipefail
cd "$(dirname "$0")"

traefik_version=v3.6.12
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

echo "-- go vet and go test -race (the traefik module)"
go vet -race ./...
go test -race -count=1 ./...

echo "-- build Traefik $traefik_version from the module proxy"
# A scratch module that requires Traefik and repeats the replace and exclude lines of its go.mod,
# which apply only where Traefik is the main module. Nothing of it is committed.
start=$SECONDS
mkdir "$work/build"
cat > "$work/build/go.mod" <<MOD
module traefikbuild

go 1.26.0

require github.com/traefik/traefik/v3 $traefik_version

replace (
	github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e
	github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
	github.com/mailgun/minheap => github.com/containous/minheap v0.0.0-20190809180810-6e71eb837595
)

exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible
MOD
(
	cd "$work/build"
	export GOWORK=off GOFLAGS=-mod=mod
	go get "github.com/traefik/traefik/v3/cmd/traefik@$traefik_version" 2>"$work/get.log" || { cat "$work/get.log"; exit 1; }
	go build -o "$work/traefik" github.com/traefik/traefik/v3/cmd/traefik
)
"$work/traefik" version
echo "built in $((SECONDS - start)) s"
go build -o "$work/smoke" ./internal/smoke

echo "-- the plugins as local plugins: plugins-local/src/<module>, with its dependencies vendored"
run="$work/run"
plugin_dir="$run/plugins-local/src/github.com/retryafter/retryafter/traefik"
mkdir -p "$plugin_dir"
# From this tree, not the module proxy: a copy of go.mod, given by -modfile, replaces the root
# module by this checkout (go.mod itself has no replace; go mod vendor refuses a workspace).
cp go.mod "$work/vendor.mod"
cp go.sum "$work/vendor.sum"
go mod edit -replace "github.com/retryafter/retryafter=$(cd .. && pwd)" "$work/vendor.mod"
GOWORK=off go mod vendor -modfile "$work/vendor.mod" -o "$plugin_dir/vendor"
for pkg in normalize maintenance; do
	mkdir "$plugin_dir/$pkg"
	cp "$pkg/.traefik.yml" "$pkg"/*.go "$plugin_dir/$pkg/"
	rm -f "$plugin_dir/$pkg"/*_test.go
done

"$work/smoke" upstream -addr-file "$work/upstream.addr" -for 10m &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/upstream.addr" ] && break; sleep 0.1; done
upstream=$(cat "$work/upstream.addr")
plain_port=$("$work/smoke" port)
norm_port=$("$work/smoke" port)
maint_port=$("$work/smoke" port)

cat > "$run/traefik.yml" <<YAML
global:
  checkNewVersion: false
  sendAnonymousUsage: false
log:
  level: DEBUG
entryPoints:
  plain:
    address: "127.0.0.1:$plain_port"
  norm:
    address: "127.0.0.1:$norm_port"
  maint:
    address: "127.0.0.1:$maint_port"
providers:
  file:
    filename: "$run/dynamic.yml"
experimental:
  localPlugins:
    retryAfterNormalize:
      moduleName: github.com/retryafter/retryafter/traefik/normalize
    retryAfterMaintenance:
      moduleName: github.com/retryafter/retryafter/traefik/maintenance
YAML
# dynamic_config writes Traefik's dynamic configuration, which it reloads when the file changes;
# its argument is the middlewares of the router on :$maint_port.
dynamic_config() {
	cat > "$run/dynamic.yml.new" <<YAML
http:
  routers:
    plain:
      entryPoints: [plain]
      rule: "PathPrefix(\`/\`)"
      service: upstream
    norm:
      entryPoints: [norm]
      rule: "PathPrefix(\`/\`)"
      service: upstream
      middlewares: [retry-after]
    maint:
      entryPoints: [maint]
      rule: "PathPrefix(\`/\`)"
      service: upstream
      middlewares: [$1]
  middlewares:
    retry-after:
      plugin:
        retryAfterNormalize:
          fillMissing: true
          fallback: 5s
    maintenance:
      plugin:
        retryAfterMaintenance:
          until: "${until:-}"
  services:
    upstream:
      loadBalancer:
        servers:
          - url: "http://$upstream"
YAML
	mv "$run/dynamic.yml.new" "$run/dynamic.yml"
}
dynamic_config ""
# Traefik finds local plugins in ./plugins-local, from its working directory.
(cd "$run" && exec "$work/traefik" --configFile="$run/traefik.yml") >"$work/traefik.log" 2>&1 &
traefik_pid=$!
pids+=("$traefik_pid")
up=0
for _ in $(seq 600); do
	if curl -s -o /dev/null "http://127.0.0.1:$norm_port/" && curl -s -o /dev/null "http://127.0.0.1:$maint_port/" &&
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$norm_port/")" = 200 ]; then
		up=1
		break
	fi
	kill -0 "$traefik_pid" 2>/dev/null || break
	grep -q 'Plugins are disabled' "$work/traefik.log" && break
	sleep 0.1
done
if [ "$up" -ne 1 ]; then
	echo "Traefik did not start with the plugins:"; cat "$work/traefik.log"; exit 1
fi
echo "Traefik (pid $traefik_pid) in front of $upstream: without the plugins on :$plain_port, retryAfterNormalize on :$norm_port, later retryAfterMaintenance on :$maint_port"

echo "-- retryAfterNormalize: httprate's 0, a UTC date, a bare 503, against the router without it"
if ! "$work/smoke" repaired "http://$upstream/" "http://127.0.0.1:$plain_port/" "http://127.0.0.1:$norm_port/"; then
	echo "Traefik's log:"; cat "$work/traefik.log"; exit 1
fi
if ! grep -q 'retryAfterNormalize [^ ]*: repaired the Retry-After of a response: kind=understood status=429' "$work/traefik.log"; then
	echo "no repair in Traefik's debug log:"; cat "$work/traefik.log"; exit 1
fi

echo "-- Python urllib3's Retry on httprate: its first retry gets through with the plugin, not without"
retry_urllib3() {
	python3 - "$1" <<'PY'
import sys
import urllib3
from urllib3.util.retry import Retry

url = sys.argv[1]
http = urllib3.PoolManager()
http.request("GET", url, retries=False)  # spends the quota of this path
retry = Retry(total=1, status_forcelist=[429], backoff_factor=0, respect_retry_after_header=True, raise_on_status=False)
r = http.request("GET", url, retries=retry)
print(f"urllib3 {urllib3.__version__} {url}: {[h.status for h in r.retries.history]} then {r.status}, Retry-After {r.headers.get('Retry-After')!r}")
sys.exit(0 if r.status == 200 else 1)
PY
}
if retry_urllib3 "http://127.0.0.1:$plain_port/httprate/urllib3"; then
	echo "urllib3 got through without the plugin: the upstream no longer shows the defect"; exit 1
fi
retry_urllib3 "http://127.0.0.1:$norm_port/httprate/urllib3"

echo "-- curl --retry on a 503 without Retry-After, down for 3 s: gets through with the plugin, not without"
# curl waits its own backoff, 1 s, where Retry-After is missing (or 0); the plugin tells it 5 s.
# curl's output goes to a file: before a retry, it truncates it, which /dev/null refuses.
code=$(curl -sS -o "$work/curl.out" -w '%{http_code}' --retry 1 "http://127.0.0.1:$plain_port/down/curl-plain" || true)
echo "curl --retry 1 without the plugin: $code"
if [ "$code" != 503 ]; then echo "curl got $code without the plugin, want 503"; exit 1; fi
code=$(curl -sS -o "$work/curl.out" -w '%{http_code}' --retry 1 "http://127.0.0.1:$norm_port/down/curl-norm")
echo "curl --retry 1 with retryAfterNormalize: $code"
if [ "$code" != 200 ]; then echo "curl got $code through the plugin, want 200"; exit 1; fi

echo "-- retryafter-check through retryAfterMaintenance"
# Put on the router now, with an end 30 s ahead, and seen to answer 503 before the probe starts.
until=$(date -u -d '+30 seconds' +%Y-%m-%dT%H:%M:%SZ)
dynamic_config maintenance
for _ in $(seq 200); do
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$maint_port/")" = 503 ] && break
	sleep 0.1
done
curl -sS -D - -o /dev/null "http://127.0.0.1:$maint_port/"
echo "retryAfterMaintenance until $until"
if ! (cd .. && go run ./cmd/retryafter-check -timeout 150s "http://127.0.0.1:$maint_port/"); then
	echo "the probe failed; Traefik's log:"; cat "$work/traefik.log"; exit 1
fi

kill "$traefik_pid"
for _ in $(seq 100); do kill -0 "$traefik_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$traefik_pid" 2>/dev/null; then
	echo "Traefik did not stop on SIGTERM"; exit 1
fi
echo "traefik: passed"
