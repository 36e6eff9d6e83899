// Command retryafter-rls is Envoy's rate limit service, configured by envoyproxy/ratelimit's
// YAML, that answers the exact wait:
//
//	retryafter-rls -config PATH [-grpc ADDR] [-http ADDR] [-redis URL | -redis-cluster ADDR,ADDR]
//
// PATH is a YAML file or a directory: every file under it, in its subdirectories too, whatever
// its name, as envoyproxy/ratelimit reads its runtime directory (-ignore-dot-files skips the
// names beginning with a dot; a symbolic link to a directory under it is refused, not skipped).
// It is read again on SIGHUP and when a file under it changes, every client keeping its state.
// -grpc (default :8081) serves envoy.service.ratelimit.v3.RateLimitService and the gRPC health
// service; -http (default :8080) serves GET /healthcheck and GET /metrics (Prometheus text,
// from package otelmetrics's instruments: the domain is rpc.method "ratelimit/DOMAIN", a rule's
// name its policy name). Without -redis or -redis-cluster the limits are kept in memory. When a
// flag is absent, envoyproxy/ratelimit's environment variable is read: RUNTIME_ROOT,
// RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY (PATH is
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, the last "config" by default),
// RUNTIME_IGNOREDOTFILES, GRPC_PORT, PORT, REDIS_URL, and LIMIT_RESPONSE_HEADERS_ENABLED
// (-limit-headers: the binding rule's limit, remaining and reset headers, named
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset unless LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER, or -limit-header, -remaining-header and
// -reset-header, name them). On SIGTERM or SIGINT the health turns NOT_SERVING, the requests
// under way finish, and the command exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/envoyrls"
	"github.com/retryafter/retryafter/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if err := run(ctx, os.Args[1:], os.Getenv, hup, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "retryafter-rls:", err)
		os.Exit(1)
	}
}

// options are the command's flags, filled from the environment where absent.
type options struct {
	config, grpc, http, redisURL, cluster string
	fields, headers, ignoreDots           bool
	headerNames                           [3]string // limit, remaining, reset
	watch, drain, redisTimeout            time.Duration
}

// parse reads args, then getenv for what they leave out.
func parse(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	ignoreDots, err := envBool(getenv, "RUNTIME_IGNOREDOTFILES")
	if err != nil {
		return o, err
	}
	headers, err := envBool(getenv, "LIMIT_RESPONSE_HEADERS_ENABLED")
	if err != nil {
		return o, err
	}
	fs := flag.NewFlagSet("retryafter-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", "", "a YAML file, or a directory of them, subdirectories included (default $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config)")
	fs.StringVar(&o.grpc, "grpc", "", "the gRPC address (default :$GRPC_PORT, else :8081)")
	fs.StringVar(&o.http, "http", "", "the HTTP address of /healthcheck and /metrics (default :$PORT, else :8080)")
	fs.StringVar(&o.redisURL, "redis", "", "a redis:// or rediss:// URL to keep the limits in (default $REDIS_URL)")
	fs.StringVar(&o.cluster, "redis-cluster", "", "the addresses of a Redis Cluster, comma-separated")
	fs.BoolVar(&o.ignoreDots, "ignore-dot-files", ignoreDots, "skip the configuration's files and directories whose names begin with a dot (default $RUNTIME_IGNOREDOTFILES)")
	fs.BoolVar(&o.fields, "ratelimit-fields", false, "add the RateLimit and RateLimit-Policy fields")
	fs.BoolVar(&o.headers, "limit-headers", headers, "add the binding rule's limit, remaining and reset headers (default $LIMIT_RESPONSE_HEADERS_ENABLED)")
	for i, h := range limitHeaders {
		fs.StringVar(&o.headerNames[i], h.flag, orDefault(getenv(h.env), h.name), "the name of the "+h.what+" header (default $"+h.env+", else "+h.name+")")
	}
	fs.DurationVar(&o.redisTimeout, "redis-timeout", redisstore.DefaultTimeout, "how long a decision may wait for Redis before it fails (UNAVAILABLE)")
	fs.DurationVar(&o.watch, "watch", time.Second, "how often to look for a changed configuration; 0: only on SIGHUP")
	fs.DurationVar(&o.drain, "drain", 10*time.Second, "how long to let requests under way finish on SIGTERM")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.config == "" && getenv("RUNTIME_ROOT") != "" {
		app := getenv("RUNTIME_APPDIRECTORY")
		if app == "" {
			app = "config"
		}
		o.config = filepath.Join(getenv("RUNTIME_ROOT"), getenv("RUNTIME_SUBDIRECTORY"), app)
	}
	o.grpc = orEnv(o.grpc, getenv("GRPC_PORT"), ":8081")
	o.http = orEnv(o.http, getenv("PORT"), ":8080")
	if o.redisURL == "" {
		o.redisURL = getenv("REDIS_URL")
	}
	switch {
	case o.config == "":
		return o, errors.New("no configuration: give -config or RUNTIME_ROOT")
	case o.redisURL != "" && o.cluster != "":
		return o, errors.New("-redis and -redis-cluster both given")
	}
	return o, nil
}

// limitHeaders are the headers of -limit-headers, as envoyproxy/ratelimit's settings name them,
// in the order of options.headerNames.
var limitHeaders = [3]struct{ flag, env, name, ours, what string }{
	{"limit-header", "LIMIT_LIMIT_HEADER", "RateLimit-Limit", "X-RateLimit-Limit", "limit"},
	{"remaining-header", "LIMIT_REMAINING_HEADER", "RateLimit-Remaining", "X-RateLimit-Remaining", "remaining"},
	{"reset-header", "LIMIT_RESET_HEADER", "RateLimit-Reset", "X-RateLimit-Reset", "reset"},
}

// orDefault returns v, else def.
func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// envBool reads the boolean variable name as envoyproxy/ratelimit does (strconv.ParseBool,
// refusing anything else), false when it is unset or empty.
func envBool(getenv func(string) string, name string) (bool, error) {
	v := getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: not a boolean", name, v)
	}
	return b, nil
}

// orEnv returns flag, else ":"+port, else def.
func orEnv(flag, port, def string) string {
	switch {
	case flag != "":
		return flag
	case port != "":
		return ":" + port
	}
	return def
}

// run serves until ctx ends, reloading the configuration on each value of hup and as it
// changes. ready, if not nil, is told the addresses served once they listen.
func run(ctx context.Context, args []string, getenv func(string) string, hup <-chan os.Signal, stderr io.Writer, ready func(grpcAddr, httpAddr string)) error {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := log.New(stderr, "retryafter-rls: ", log.LstdFlags)
	cfg, err := envoyrls.Loader{IgnoreDotFiles: o.ignoreDots}.Load(o.config)
	if err != nil {
		return err
	}
	limiter, storeName, closeStore, err := store(o)
	if err != nil {
		return err
	}
	defer closeStore()
	mx, err := newMetrics()
	if err != nil {
		return err
	}
	defer mx.provider.Shutdown(context.Background())
	svc := envoyrls.New(cfg, mx.limiter(storeName, limiter), envoyrls.WithRateLimitFields(o.fields),
		envoyrls.WithXRateLimitHeaders(o.headers), envoyrls.WithDecisionHook(mx.decided))

	gl, err := net.Listen("tcp", o.grpc)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", o.http)
	if err != nil {
		gl.Close()
		return err
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, renamed{svc, o.headerNames})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", mx.handler)
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if ctx.Err() != nil {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "OK")
	})
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- gs.Serve(gl) }()
	go func() { errs <- httpSrv.Serve(hl) }()
	if ready != nil {
		ready(gl.Addr().String(), hl.Addr().String())
	}
	logger.Printf("serving RateLimitService on %s, /healthcheck on %s", gl.Addr(), hl.Addr())
	if err := watch(ctx, o, svc, logger, hup, errs); err != nil {
		gs.Stop()
		httpSrv.Close()
		return err
	}
	hs.Shutdown() // every service NOT_SERVING
	drain(gs, httpSrv, o.drain)
	return nil
}

// watch reloads the configuration on each value of hup and as it changes, until ctx ends (it
// returns nil) or a server fails (it returns its error, from errs).
func watch(ctx context.Context, o options, svc *envoyrls.Service, logger *log.Logger, hup <-chan os.Signal, errs <-chan error) error {
	reload := func(why string) {
		c, err := envoyrls.Loader{IgnoreDotFiles: o.ignoreDots}.Load(o.config)
		if err != nil {
			logger.Printf("%s: keeping the configuration loaded: %v", why, err)
			return
		}
		svc.SetConfig(c)
		logger.Printf("%s: configuration reloaded", why)
	}
	var tick <-chan time.Time
	if o.watch > 0 {
		t := time.NewTicker(o.watch)
		defer t.Stop()
		tick = t.C
	}
	seen := stamp(o.config)
	for {
		select {
		case <-hup:
			reload("SIGHUP")
			seen = stamp(o.config)
		case <-tick:
			if s := stamp(o.config); s != seen {
				seen = s
				reload("changed")
			}
		case err := <-errs:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// renamed is a Service whose X-RateLimit-Limit, -Remaining and -Reset headers are named as
// envoyproxy/ratelimit names them: names, in the order of limitHeaders.
type renamed struct {
	*envoyrls.Service
	names [3]string
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (r renamed) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := r.Service.ShouldRateLimit(ctx, req)
	for _, h := range resp.GetResponseHeadersToAdd() {
		for i, l := range limitHeaders {
			if h.GetKey() == l.ours {
				h.Key = r.names[i]
			}
		}
	}
	return resp, err
}

// drain lets the requests under way finish, for at most d, then stops.
func drain(gs *grpc.Server, hs *http.Server, d time.Duration) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	hs.Shutdown(ctx)
	select {
	case <-done:
	case <-ctx.Done():
		gs.Stop()
	}
}

// stamp returns what changes when a configuration file at or under path is written, added or
// removed: the name, size and modification time of each, through symbolic links.
func stamp(path string) string {
	var b strings.Builder
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path += string(filepath.Separator) // walked when it is a symbolic link too
	}
	filepath.WalkDir(path, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
		}
		return nil
	})
	return b.String()
}

// store returns the LimiterFunc of o's store (memory, a Redis or a Redis Cluster) and its name.
func store(o options) (envoyrls.LimiterFunc, string, func(), error) {
	var client redis.UniversalClient
	switch {
	case o.redisURL != "":
		opt, err := redis.ParseURL(o.redisURL)
		if err != nil {
			return nil, "", nil, fmt.Errorf("-redis: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		client = redis.NewClient(opt)
	case o.cluster != "":
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(o.cluster, ","), ContextTimeoutEnabled: true})
	default:
		return envoyrls.Memory, "memory", func() {}, nil
	}
	f := func(policy func(string) retryafter.Policy) retryafter.Limiter {
		return redisstore.New(client, rate.Inf, 1, redisstore.WithPolicyFunc(policy), redisstore.WithTimeout(o.redisTimeout))
	}
	return f, "redis", func() { client.Close() }, nil
}
