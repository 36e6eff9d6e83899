package otelmetrics

import (
	"strings"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/retryafter/retryafter"
)

// The attribute keys, and the value a name is folded into past a bound.
const (
	outcomeKey = attribute.Key("retryafter.outcome")
	policyKey  = attribute.Key("retryafter.policy.name")
	routeKey   = attribute.Key("http.route")
	methodKey  = attribute.Key("rpc.method")
	limiterKey = attribute.Key("retryafter.limiter.name")
	errorKey   = attribute.Key("error.type")

	// Other is the value of a policy name or route past its bound, or one that is not fit to be
	// recorded, as OpenTelemetry's conventions fold unknown values.
	Other = "_OTHER"

	maxPolicyLen = 64
	maxRouteLen  = 256
)

// route returns the http.route of a request that the mux matched with pattern: the pattern
// without its method ("GET /items/{id}" is "/items/{id}"), as OpenTelemetry's HTTP conventions
// have it; "" when no route matched, and then the attribute is left out.
func route(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}

// An attrKey is what a decision's attributes depend on: policy is "" when the limiter was not
// asked, route "" when no route matched; with rpc, route is a gRPC call's method.
type attrKey struct {
	outcome retryafter.Outcome
	policy  string
	route   string
	rpc     bool
}

// attrs are the options of one attribute set, made once so that recording allocates nothing.
type attrs struct {
	decision   []metric.AddOption    // outcome, policy, route
	quota      []metric.AddOption    // policy, route
	retryAfter []metric.RecordOption // policy, route
}

// An attrCache holds the attrs of every key seen, with at most maxPolicies policy names and
// maxRoutes routes and methods besides Other: so at most 6 × (maxPolicies + 2) × 2(maxRoutes + 2)
// entries, whatever the requests.
type attrCache struct {
	mu          sync.RWMutex
	byKey       map[attrKey]*attrs
	policies    map[string]bool
	routes      map[string]bool
	maxPolicies int
	maxRoutes   int
}

func (c *attrCache) init(maxPolicies, maxRoutes int) {
	c.byKey = map[attrKey]*attrs{}
	c.policies, c.routes = map[string]bool{}, map[string]bool{}
	c.maxPolicies, c.maxRoutes = maxPolicies, maxRoutes
}

// get returns the attrs of k, with its names folded into Other past their bounds.
func (c *attrCache) get(k attrKey) *attrs {
	c.mu.RLock()
	a := c.byKey[k]
	if a == nil {
		if f, known := c.fold(k); known {
			a = c.byKey[f]
		}
	}
	c.mu.RUnlock()
	if a != nil {
		return a
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, _ := c.fold(k)
	if f.policy != "" && f.policy != Other {
		c.policies[f.policy] = true
	}
	if f.route != "" && f.route != Other {
		c.routes[f.route] = true
	}
	if a = c.byKey[f]; a == nil {
		a = newAttrs(f)
		c.byKey[f] = a
	}
	return a
}

// fold returns k with each name that is past its bound, or unfit, as Other, and reports whether
// each of its names is already known (or folded), so that no name need be added.
func (c *attrCache) fold(k attrKey) (attrKey, bool) {
	var newP, newR bool
	k.policy, newP = foldName(k.policy, c.policies, c.maxPolicies, validPolicy)
	k.route, newR = foldName(k.route, c.routes, c.maxRoutes, validRoute)
	return k, !newP && !newR
}

// foldName returns name, or Other when it is unfit or seen is full without it, and whether it is
// a name to be added to seen.
func foldName(name string, seen map[string]bool, most int, valid func(string) bool) (string, bool) {
	switch {
	case name == "" || name == Other || seen[name]:
		return name, false
	case !valid(name) || len(seen) >= most:
		return Other, false
	}
	return name, true
}

// validPolicy reports whether a policy name is fit to be recorded: 64 bytes at most, printable
// ASCII, as the RateLimit fields require of it.
func validPolicy(s string) bool {
	if len(s) > maxPolicyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validRoute reports whether a route is fit to be recorded: 256 bytes at most, valid UTF-8.
func validRoute(s string) bool {
	return len(s) <= maxRouteLen && utf8.ValidString(s)
}

// newAttrs returns the attrs of k.
func newAttrs(k attrKey) *attrs {
	var kvs []attribute.KeyValue
	if k.policy != "" {
		kvs = append(kvs, policyKey.String(k.policy))
	}
	switch {
	case k.route == "":
	case k.rpc:
		kvs = append(kvs, methodKey.String(k.route))
	default:
		kvs = append(kvs, routeKey.String(k.route))
	}
	quota := attribute.NewSet(kvs...)
	decision := attribute.NewSet(append(kvs, outcomeKey.String(k.outcome.String()))...)
	return &attrs{
		decision:   []metric.AddOption{metric.WithAttributeSet(decision)},
		quota:      []metric.AddOption{metric.WithAttributeSet(quota)},
		retryAfter: []metric.RecordOption{metric.WithAttributeSet(quota)},
	}
}
