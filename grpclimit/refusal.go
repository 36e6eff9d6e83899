package grpclimit

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// PushbackKey is the trailer of gRFC A6 (retry design) in which a server tells a client with a
// retry policy when to retry: whole milliseconds, or a negative number for "do not retry".
// grpc-go, grpc-java and gRPC core obey it.
const PushbackKey = "grpc-retry-pushback-ms"

// neverPushback is the pushback of a call that can never be admitted: "do not retry".
const neverPushback = "-1"

// failPushback is the pushback of a call the limiter could not decide: failWait.
var failPushback = strconv.FormatInt(failWait.Milliseconds(), 10)

// failWait is the wait a call refused because the limiter failed is told, as over HTTP.
const failWait = edge.FailWait

// refusal returns the status that ends a call d refused, RESOURCE_EXHAUSTED, and its trailer:
// a RetryInfo and a pushback of the same milliseconds, or, for a call that can never be
// admitted, no RetryInfo and a pushback of -1; a QuotaFailure names the violated policies.
func (s *server) refusal(d *retryafter.Decision) (*status.Status, metadata.MD) {
	q := s.quotas.quotaFailure(d)
	ms, ok := edge.Millis(d.RetryAfter)
	if !ok {
		st := s.status(codes.ResourceExhausted, "rate limited: this call exceeds what its limit ever admits", 0, q)
		return st, pushbackTrailer(neverPushback)
	}
	t := new(refusalText)
	b := appendWait(append(t.text[:0], "rate limited: retry in "...), ms)
	n := len(b)
	b = strconv.AppendInt(b, ms, 10)
	// t's bytes are never written again: the message and the pushback's digits are read from them.
	text := unsafe.String(unsafe.SliceData(b), len(b))
	t.pushback[0] = text[n:]
	wait := time.Duration(ms) * time.Millisecond
	return s.status(codes.ResourceExhausted, text[:n], wait, q), metadata.MD{PushbackKey: t.pushback[:]}
}

// A refusalText holds the text of a refusal, its message and then its pushback's digits, and
// the trailer's value of the pushback: one allocation for the three.
type refusalText struct {
	pushback [1]string
	text     [len("rate limited: retry in ") + 24 + 20]byte // the longest wait and digits
}

// unavailable returns the status that ends a call the limiter could not decide, UNAVAILABLE,
// and its trailer: a short wait, as RetryInfo and pushback. It never names the error.
func (s *server) unavailable() (*status.Status, metadata.MD) {
	st := s.status(codes.Unavailable, "rate limiter unavailable", failWait, nil)
	return st, pushbackTrailer(failPushback)
}

// appendWait appends a wait of ms milliseconds, at least 1, as time.Duration's String writes it
// ("1.5s", "1h0m0.001s", "999ms") without its work on the digits below a millisecond.
func appendWait(b []byte, ms int64) []byte {
	if ms < 1000 {
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	sec := ms / 1000
	if h := sec / 3600; h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
	}
	if sec >= 60 {
		b = append(appendSixty(b, sec/60%60), 'm')
	}
	b = appendSixty(b, sec%60)
	if frac := ms % 1000; frac > 0 {
		digits := [4]byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := len(digits)
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, digits[:n]...)
	}
	return append(b, 's')
}

// appendSixty appends n, from 0 to 59, in decimal.
func appendSixty(b []byte, n int64) []byte {
	if n >= 10 {
		b = append(b, byte('0'+n/10))
	}
	return append(b, byte('0'+n%10))
}

// pushbackTrailer returns the trailer of a pushback of ms, as metadata.Pairs(PushbackKey, ms)
// would.
func pushbackTrailer(ms string) metadata.MD {
	return metadata.MD{PushbackKey: {ms}}
}

// A draft is what a status is built from, kept in a pool: status.FromProto copies it.
type draft struct {
	st      spb.Status
	retry   anypb.Any
	details [2]*anypb.Any
	wire    [retryInfoSize]byte
}

func newDraft() any {
	d := new(draft)
	d.retry.TypeUrl = retryInfoURL
	return d
}

// status returns the status of code and msg with a RetryInfo of wait, unless wait is 0, and
// quota, a QuotaFailure already in its Any form, unless nil: what status.New(code,
// msg).WithDetails of the messages returns, without marshalling the QuotaFailure again.
func (s *server) status(code codes.Code, msg string, wait time.Duration, quota *anypb.Any) *status.Status {
	d := s.drafts.Get().(*draft)
	details := d.details[:0]
	if wait > 0 {
		d.retry.Value = appendRetryInfo(d.wire[:0], wait)
		details = append(details, &d.retry)
	}
	if quota != nil {
		details = append(details, quota)
	}
	d.st.Code, d.st.Message, d.st.Details = int32(code), msg, details
	st := status.FromProto(&d.st) // a deep copy, but for the strings
	d.st.Message, d.st.Details, d.details = "", nil, [2]*anypb.Any{}
	s.drafts.Put(d)
	return st
}

// Type URLs of the details, as anypb.New writes them.
const (
	retryInfoURL    = "type.googleapis.com/google.rpc.RetryInfo"
	quotaFailureURL = "type.googleapis.com/google.rpc.QuotaFailure"
)

// Tags of the fields of a RetryInfo's wire form: its retry_delay, a Duration, and the Duration's
// seconds and nanos.
const (
	delayTag = 1<<3 | byte(protowire.BytesType)
	secTag   = 1<<3 | byte(protowire.VarintType)
	nanosTag = 2<<3 | byte(protowire.VarintType)
)

// retryInfoSize is the most bytes a RetryInfo's wire form takes: a field of a Duration of two
// varint fields.
const retryInfoSize = 2 + 2*(1+binary.MaxVarintLen64)

// appendRetryInfo appends to b the wire form of a RetryInfo of wait, a positive whole number of
// milliseconds: the bytes proto.Marshal writes of RetryInfo{RetryDelay: durationpb.New(wait)},
// a Duration of seconds and nanoseconds, each left out when 0.
func appendRetryInfo(b []byte, wait time.Duration) []byte {
	b = append(b, delayTag, 0)
	start := len(b)
	if sec := uint64(wait / time.Second); sec != 0 {
		b = binary.AppendUvarint(append(b, secTag), sec)
	}
	if nanos := uint64(wait % time.Second); nanos != 0 {
		b = binary.AppendUvarint(append(b, nanosTag), nanos)
	}
	b[start-1] = byte(len(b) - start) // the Duration's length, below 128: one byte
	return b
}

// maxQuotaPolicies bounds the policies whose QuotaFailure a server keeps.
const maxQuotaPolicies = 64

// quotaCache keeps the QuotaFailure of a refusal by each policy alone, built at the policy's
// first refusal, for up to maxQuotaPolicies policies; those of the rest are built at each
// refusal. It is safe for concurrent use: readers load the list without a lock, and a new
// policy replaces it with a longer copy.
type quotaCache struct {
	mu   sync.Mutex // held to replace kept
	kept atomic.Pointer[[]keptQuota]
}

// A keptQuota is the QuotaFailure of a refusal by policy alone.
type keptQuota struct {
	policy retryafter.Policy
	quota  *anypb.Any
}

// find returns the QuotaFailure kept for p, nil when there is none. A server has a policy or a
// few: a look along a short list costs less than hashing one.
func (c *quotaCache) find(p retryafter.Policy) *anypb.Any {
	if kept := c.kept.Load(); kept != nil {
		for i := range *kept {
			if (*kept)[i].policy == p {
				return (*kept)[i].quota
			}
		}
	}
	return nil
}

// quotaFailure returns the QuotaFailure, as an Any, that names the policies d violated: the
// layers that refused, or d's own policy when it was decided in one. It is nil when there is
// none to name.
func (c *quotaCache) quotaFailure(d *retryafter.Decision) *anypb.Any {
	layers := d.Layers()
	if layers == nil {
		return c.of(d.Policy)
	}
	var q *anypb.Any
	for _, l := range layers {
		if l.Allowed {
			continue
		}
		switch v := c.of(l.Policy); {
		case v == nil:
		case q == nil:
			q = v
		default:
			// A QuotaFailure's wire form is its violations' one after another.
			q = &anypb.Any{TypeUrl: quotaFailureURL, Value: slices.Concat(q.Value, v.Value)}
		}
	}
	return q
}

// of returns the QuotaFailure of a refusal by p alone, nil when it does not marshal (a name
// that is not UTF-8).
func (c *quotaCache) of(p retryafter.Policy) *anypb.Any {
	if q := c.find(p); q != nil {
		return q
	}
	q, err := anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{violation(p)}})
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.find(p); q != nil { // kept by another refusal meanwhile
		return q
	}
	var kept []keptQuota
	if old := c.kept.Load(); old != nil {
		kept = *old
	}
	if len(kept) < maxQuotaPolicies {
		kept = append(slices.Clip(kept), keptQuota{p, q})
		c.kept.Store(&kept)
	}
	return q
}

// violation describes the policy p as a QuotaFailure's violation: its name ("default" when it
// has none) as subject and quota id, and its burst as the quota value.
func violation(p retryafter.Policy) *errdetails.QuotaFailure_Violation {
	name := p.Name
	if name == "" {
		name = "default"
	}
	v := &errdetails.QuotaFailure_Violation{
		Subject:     "policy:" + name,
		QuotaId:     name,
		QuotaValue:  int64(p.Burst),
		Description: "rate limit " + name + " exceeded",
	}
	if p.Limit > 0 && p.Limit != rate.Inf && p.Burst > 0 {
		v.Description += ": " + strconv.Itoa(p.Burst) + " at once, " + restoredPer(float64(p.Limit))
	}
	return v
}

// units are the spans a rate is stated per, shortest first.
var units = []struct {
	name    string
	seconds float64
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

// restoredPer states limit, a positive rate per second, as people write a rate: a whole number
// per second, a decimal of up to three places per second (from 1 a second), a whole number per
// minute, hour or day, or else "about" three figures per the shortest unit in which it is at
// least 1 ("about 8.57 restored per minute" for one every 7 seconds).
func restoredPer(limit float64) string {
	// whole allows the error of the product that made n: a few units in its last place.
	whole := func(n float64) bool { return n < 1e15 && math.Abs(n-math.Round(n)) <= 1e-13*n }
	say := func(n float64, unit string) string {
		return strconv.FormatFloat(n, 'f', -1, 64) + " restored per " + unit
	}
	if whole(limit) || limit >= 1 && whole(limit*1000) {
		return say(math.Round(limit*1000)/1000, "second")
	}
	for _, u := range units[1:] {
		if n := limit * u.seconds; whole(n) {
			return say(math.Round(n), u.name)
		}
	}
	u := units[len(units)-1]
	for _, v := range units {
		if limit*v.seconds >= 1 {
			u = v
			break
		}
	}
	n := limit * u.seconds
	if n >= 1e15 {
		return "about " + strconv.FormatFloat(n, 'g', 3, 64) + " restored per " + u.name
	}
	places := max(0, 2-int(math.Floor(math.Log10(n))))
	return "about " + say(roundTo(n, places), u.name)
}

// roundTo returns n rounded to places decimal places.
func roundTo(n float64, places int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(n, 'f', places, 64), 64)
	return f
}
