package envoyrls

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// The limits on one request: beyond MaxDescriptors, MaxEntries, or a domain of MaxLength, it
// is refused with INVALID_ARGUMENT. A descriptor's key or value longer than MaxLength (a value
// the client writes: a path, a header) is matched as written and counts in the client's key by
// its SHA-256, so that no client is kept apart from its limit by its length nor grows the
// memory of keys by it.
const (
	MaxDescriptors = 64  // descriptors a request
	MaxEntries     = 16  // entries a descriptor
	MaxLength      = 256 // bytes a domain; a key or value longer counts by its digest
	maxLayers      = 16  // descriptors with a limit that retryafter.All decides at once
)

// A Service is envoy.service.ratelimit.v3.RateLimitService over a retryafter.Limiter: it
// decides the descriptors of a request together, all admitted or none charged, and answers
// the exact wait. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	limiter retryafter.Limiter
	config  atomic.Pointer[Config]
	now     func() time.Time
	fields  bool
	legacy  bool
	decided func(Report)
}

// An Option configures a Service.
type Option func(*Service)

// WithClock makes the Service read the time from now. The default is time.Now. It panics if now
// is nil.
func WithClock(now func() time.Time) Option {
	if now == nil {
		panic("envoyrls: WithClock(nil)")
	}
	return func(s *Service) { s.now = now }
}

// WithRateLimitFields makes the Service add the RateLimit and RateLimit-Policy fields of the
// binding rule to every response with a limit. The default is off.
func WithRateLimitFields(on bool) Option { return func(s *Service) { s.fields = on } }

// WithXRateLimitHeaders makes the Service add X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset, the values envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED adds,
// which it names RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset by default (the
// command retryafter-rls renames them as it does). The default is off.
func WithXRateLimitHeaders(on bool) Option { return func(s *Service) { s.legacy = on } }

// WithDecisionHook makes the Service call fn with each decision of a rule, on the request's
// goroutine, for metrics. The default is none.
func WithDecisionHook(fn func(Report)) Option { return func(s *Service) { s.decided = fn } }

// A Report is one rule's decision of one request.
type Report struct {
	Domain   string
	Rule     *Rule
	Outcome  retryafter.Outcome // Admitted, Refused or DryRunRefused (shadow_mode)
	Decision retryafter.Decision
}

// A LimiterFunc returns the Limiter a Service decides through, given the policy of each key:
// the Limiter must ask policy for the limit of each key it decides (as
// retryafter.WithPolicyFunc and redisstore.WithPolicyFunc do), and treat a zero Policy as no
// limit.
type LimiterFunc func(policy func(key string) retryafter.Policy) retryafter.Limiter

// Memory is the LimiterFunc of a retryafter.TokenBucket in memory.
func Memory(policy func(key string) retryafter.Policy) retryafter.Limiter {
	return retryafter.NewTokenBucket(rate.Inf, 1, retryafter.WithPolicyFunc(policy))
}

// New returns a Service of the rules of c, deciding through the Limiter that limiter makes.
// It panics if c, limiter or an option is nil.
func New(c *Config, limiter LimiterFunc, opts ...Option) *Service {
	if c == nil || limiter == nil {
		panic("envoyrls: New with a nil Config or LimiterFunc")
	}
	s := &Service{now: time.Now}
	s.config.Store(c)
	for _, o := range opts {
		if o == nil {
			panic("envoyrls: nil Option")
		}
		o(s)
	}
	s.limiter = limiter(s.policy)
	return s
}

// SetConfig makes the Service decide by c from its next request on. Every client keeps its
// state: a rule at the same place (domain and path of descriptors) keeps its clients' tokens,
// capped at its new burst.
func (s *Service) SetConfig(c *Config) {
	if c == nil {
		panic("envoyrls: SetConfig(nil)")
	}
	s.config.Store(c)
}

// Config returns the rules the Service decides by.
func (s *Service) Config() *Config { return s.config.Load() }

// policy returns the policy of a key made by Config.Match: its rule's, in the current rules;
// the zero Policy (no limit) for a rule a reload removed.
func (s *Service) policy(key string) retryafter.Policy {
	id, ok := ruleID(key)
	if !ok {
		return retryafter.Policy{}
	}
	r := s.config.Load().ruleOf(id)
	if r == nil || r.Unlimited || r.RequestsPerUnit == 0 {
		return retryafter.Policy{}
	}
	return r.Policy()
}

// An item is one descriptor of a request, as the Service decides it.
type item struct {
	rule *Rule
	key  string
	cost int
	d    retryafter.Decision
}

// limited reports whether the item is decided by the limiter, and enforced.
func (it *item) limited() bool {
	return it.rule != nil && !it.rule.Unlimited && !it.rule.ShadowMode && it.rule.RequestsPerUnit > 0
}

// ShouldRateLimit implements RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := check(req); err != nil {
		return nil, err
	}
	now := s.now()
	items := s.match(req)
	banned := false
	var enforced []*item
	for _, it := range items {
		switch {
		case it.rule == nil || it.rule.Unlimited || it.rule.ShadowMode:
		case it.rule.RequestsPerUnit == 0:
			banned = true
			it.d = retryafter.Decision{RetryAfter: rate.InfDuration, Policy: it.rule.Policy()}
		default:
			enforced = append(enforced, it)
		}
	}
	if banned {
		for _, it := range enforced {
			it.cost = 0 // a peek, for the statuses: nothing is spent
		}
	}
	admitted := !banned
	if len(enforced) > 0 {
		ok, err := s.decide(ctx, enforced, now)
		if err != nil {
			return nil, err
		}
		admitted = admitted && ok
	}
	if admitted {
		if err := s.shadow(ctx, req.GetDomain(), items, now); err != nil {
			return nil, err
		}
	}
	s.report(req.GetDomain(), items, admitted)
	return s.respond(items, admitted), nil
}

// check refuses a request beyond the limits, or without a domain or descriptors.
func check(req *rlsv3.RateLimitRequest) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, format, args...)
	}
	switch {
	case req.GetDomain() == "":
		return bad("rate limit domain must not be empty")
	case len(req.GetDomain()) > MaxLength:
		return bad("domain longer than %d bytes", MaxLength)
	case len(req.GetDescriptors()) == 0:
		return bad("rate limit descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return bad("%d descriptors, more than %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		switch {
		case len(d.GetEntries()) > MaxEntries:
			return bad("descriptor %d: %d entries, more than %d", i, len(d.GetEntries()), MaxEntries)
		case d.GetLimit() != nil:
			return bad("descriptor %d: limit overrides are not supported", i)
		case d.GetIsNegativeHits():
			return bad("descriptor %d: negative hits are not supported", i)
		}
	}
	return nil
}

// match finds the rule and cost of each descriptor, and drops the rules that another matched
// rule replaces, as envoyproxy/ratelimit does.
func (s *Service) match(req *rlsv3.RateLimitRequest) []*item {
	c := s.config.Load()
	items := make([]*item, len(req.GetDescriptors()))
	var replaced map[string]bool
	for i, d := range req.GetDescriptors() {
		r, key := c.Match(req.GetDomain(), d)
		items[i] = &item{rule: r, key: key, cost: cost(req, d)}
		if r != nil {
			for _, name := range r.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
	}
	for _, it := range items {
		if it.rule != nil && it.rule.Name != "" && replaced[it.rule.Name] {
			it.rule = nil
		}
	}
	return items
}

// cost returns a descriptor's hits_addend where set, 0 checking without counting, else the
// request's, 0 meaning 1, as envoyproxy/ratelimit reads them; a cost above MaxInt32 is
// MaxInt32, which no burst of a rule holds.
func cost(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int {
	n := max(uint64(req.GetHitsAddend()), 1)
	if h := d.GetHitsAddend(); h != nil {
		n = h.GetValue()
	}
	return int(min(n, math.MaxInt32))
}

// decide decides the enforced items together, all admitted or none charged, and fills their
// decisions: those that count against one key as one of their summed cost (see byKey), each
// told that one's decision.
func (s *Service) decide(ctx context.Context, items []*item, now time.Time) (bool, error) {
	merged := byKey(items)
	admitted, err := s.decideKeys(ctx, merged, now)
	if len(merged) < len(items) {
		for _, it := range items {
			it.d = merged[slices.IndexFunc(merged, func(m *item) bool { return m.key == it.key })].d
		}
	}
	return admitted, err
}

// decideKeys decides items of distinct keys together. Items of one cost, at most 16, are one
// retryafter.All; more, or several costs, are decided one All after the other, and what the
// admitted ones spent is given back when another refuses, which needs a Limiter that is a
// retryafter.Charger.
func (s *Service) decideKeys(ctx context.Context, items []*item, now time.Time) (bool, error) {
	groups := groupByCost(items)
	admitted := true
	for _, g := range groups {
		ok, err := s.decideGroup(ctx, g, now)
		if err != nil {
			s.refund(ctx, groups, now)
			return false, status.Errorf(codes.Unavailable, "the limiter could not decide: %v", err)
		}
		admitted = admitted && ok
	}
	if !admitted && len(groups) > 1 {
		if err := s.refund(ctx, groups, now); err != nil {
			return false, status.Errorf(codes.Unavailable, "the limiter could not give back: %v", err)
		}
	}
	return admitted, nil
}

// byKey returns items with those that count against one key (one client of one rule) made one,
// of their summed cost, in the order of their first: so that the client is decided for all the
// request asks of it at once, and a refusal tells the wait for all of it, whatever the costs of
// its descriptors. It returns items itself when no two share a key.
func byKey(items []*item) []*item {
	if !sharesKey(items) {
		return items
	}
	merged := make([]*item, 0, len(items))
	for _, it := range items {
		if i := slices.IndexFunc(merged, func(m *item) bool { return m.key == it.key }); i >= 0 {
			merged[i].cost = min(merged[i].cost+it.cost, math.MaxInt32)
			continue
		}
		c := *it
		merged = append(merged, &c)
	}
	return merged
}

// sharesKey reports whether two of items count against one key.
func sharesKey(items []*item) bool {
	for i, it := range items {
		for _, other := range items[:i] {
			if other.key == it.key {
				return true
			}
		}
	}
	return false
}

// groupByCost splits items into groups of one cost and at most maxLayers each, in order.
func groupByCost(items []*item) [][]*item {
	var groups [][]*item
	for _, it := range items {
		placed := false
		for i, g := range groups {
			if g[0].cost == it.cost && len(g) < maxLayers {
				groups[i] = append(g, it)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, []*item{it})
		}
	}
	return groups
}

// decideGroup decides items of one cost in one retryafter.All.
func (s *Service) decideGroup(ctx context.Context, items []*item, now time.Time) (bool, error) {
	if len(items) == 1 {
		d, err := s.limiter.Decide(ctx, items[0].key, items[0].cost, now)
		items[0].d = d
		return d.Allowed, err
	}
	layers := make([]retryafter.Limiter, len(items))
	for i, it := range items {
		layers[i] = retryafter.Shared(s.limiter, it.key)
	}
	d, err := retryafter.All(layers...).Decide(ctx, "", items[0].cost, now)
	if err != nil {
		return false, err
	}
	ds := d.Layers()
	for i, it := range items {
		it.d = d
		if len(ds) == len(items) {
			it.d = ds[i]
		}
	}
	return d.Allowed, nil
}

// refund gives back what the admitted groups spent, at now, when several groups were decided.
func (s *Service) refund(ctx context.Context, groups [][]*item, now time.Time) error {
	c, ok := s.limiter.(retryafter.Charger)
	if !ok {
		return errors.New("descriptors of several costs, or more than 16 with a limit, need a Limiter that is a retryafter.Charger")
	}
	var errs []error
	for _, g := range groups {
		if !groupAdmitted(g) {
			continue
		}
		for _, it := range g {
			if err := c.Charge(ctx, it.key, -it.cost, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// groupAdmitted reports whether every item of g was admitted, and so spent its cost.
func groupAdmitted(g []*item) bool {
	for _, it := range g {
		if !it.d.Allowed {
			return false
		}
	}
	return true
}

// shadow decides each shadow_mode item of an admitted request on its own, as enforcement
// would: admitted, it spends; refused, it spends nothing and is reported.
func (s *Service) shadow(ctx context.Context, domain string, items []*item, now time.Time) error {
	for _, it := range items {
		if it.rule == nil || !it.rule.ShadowMode || it.rule.Unlimited {
			continue
		}
		if it.rule.RequestsPerUnit == 0 {
			it.d = retryafter.Decision{RetryAfter: rate.InfDuration, Policy: it.rule.Policy()}
			continue
		}
		d, err := s.limiter.Decide(ctx, it.key, it.cost, now)
		if err != nil {
			return status.Errorf(codes.Unavailable, "the limiter could not decide: %v", err)
		}
		it.d = d
	}
	return nil
}

// report tells the decision hook of each rule's decision: of every rule asked, a shadow_mode
// rule only when the request was admitted (see shadow).
func (s *Service) report(domain string, items []*item, admitted bool) {
	if s.decided == nil {
		return
	}
	for _, it := range items {
		if it.rule == nil || it.rule.Unlimited || it.rule.ShadowMode && !admitted {
			continue
		}
		o := edge.Admitted
		switch {
		case it.rule.ShadowMode && !it.d.Allowed:
			o = edge.DryRunRefused
		case !it.d.Allowed || !admitted:
			o = edge.Refused
		}
		s.decided(Report{Domain: domain, Rule: it.rule, Outcome: o, Decision: it.d})
	}
}

// respond builds the answer: each descriptor's status, the overall code, and the headers.
func (s *Service) respond(items []*item, admitted bool) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if !admitted {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	var binding *item
	for _, it := range items {
		st := descriptorStatus(it)
		resp.Statuses = append(resp.Statuses, st)
		if it.limited() || (it.rule != nil && it.rule.RequestsPerUnit == 0 && !it.rule.Unlimited && !it.rule.ShadowMode) {
			if binding == nil || tighter(it, binding) {
				binding = it
			}
		}
	}
	if binding == nil {
		return resp
	}
	if !admitted {
		if secs, ok := edge.DelaySeconds(binding.d.RetryAfter); ok {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, header("Retry-After", secs))
		}
	}
	resp.ResponseHeadersToAdd = s.appendFields(resp.ResponseHeadersToAdd, binding)
	return resp
}

// tighter reports whether a binds the request rather than b, as edge.Binding binds layers:
// refused with a longer wait, or refused where b is admitted, or, both admitted, less
// Remaining, which the request meets first, so that the Remaining told is how many more of it
// are admitted.
func tighter(a, b *item) bool {
	switch {
	case a.d.Allowed != b.d.Allowed:
		return !a.d.Allowed
	case !a.d.Allowed:
		return a.d.RetryAfter > b.d.RetryAfter
	case a.d.Limit <= 0:
		return false
	case b.d.Limit <= 0:
		return true
	}
	return a.d.Remaining < b.d.Remaining
}

// descriptorStatus is the status of one descriptor.
func descriptorStatus(it *item) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	r := it.rule
	switch {
	case r == nil:
		return st
	case r.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
	st.LimitRemaining = uint32(min(int64(max(it.d.Remaining, 0)), math.MaxUint32))
	if !it.d.Allowed && !r.ShadowMode {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.LimitRemaining = 0
		if secs, ok := edge.DelaySeconds(it.d.RetryAfter); ok {
			st.DurationUntilReset = &durationpb.Duration{Seconds: secs} // past what a Duration holds too
		}
		return st
	}
	if it.d.Reset > 0 && it.d.Reset < rate.InfDuration {
		st.DurationUntilReset = &durationpb.Duration{Seconds: ceilSeconds(it.d.Reset)}
	}
	return st
}

// ceilSeconds returns d rounded up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
