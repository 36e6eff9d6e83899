package connectlimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/retryafter/retryafter"
	"github.com/retryafter/retryafter/edge"
)

// PushbackKey is the trailer of gRFC A6 (retry design) in which a server tells a gRPC client
// with a retry policy when to retry: whole milliseconds, or a negative number for "do not
// retry". The interceptor sends it on the gRPC and gRPC-Web protocols.
const PushbackKey = "grpc-retry-pushback-ms"

// Header names, canonical.
const (
	retryAfter      = "Retry-After"
	pushbackHeader  = "Grpc-Retry-Pushback-Ms"
	rateLimit       = "Ratelimit"
	rateLimitPolicy = "Ratelimit-Policy"
)

// refusal returns the error that ends a call v does not pass: resource_exhausted for a
// refusal, internal for a key function that failed, unavailable for a limiter that failed, the
// context's code for a call whose context ended; with the wait as RetryInfo, and as
// Retry-After or the pushback as the call's protocol reads it.
func (i *interceptor) refusal(ctx context.Context, v *edge.Verdict, call Call) error {
	code, msg := connect.CodeUnavailable, "rate limiter unavailable"
	switch {
	case v.Outcome == edge.Refused:
		code, msg = connect.CodeResourceExhausted, "rate limited"
	case v.Failure == edge.KeyFailed:
		return connect.NewError(connect.CodeInternal, errors.New("rate limiter: no key for the call"))
	case v.Failure == edge.Canceled && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	case v.Failure == edge.Canceled:
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	grpc := call.Peer.Protocol == connect.ProtocolGRPC || call.Peer.Protocol == connect.ProtocolGRPCWeb
	wait := v.Wait()
	ms, ok := edge.Millis(wait)
	if !ok {
		err := connect.NewError(code, errors.New(msg+": this call exceeds what its limit ever admits"))
		if grpc {
			err.Meta().Set(pushbackHeader, "-1")
		}
		i.refusalFields(err, v)
		return err
	}
	told := time.Duration(ms) * time.Millisecond
	err := connect.NewError(code, errors.New(msg+": retry in "+told.String()))
	if ri, e := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(told)}); e == nil {
		err.AddDetail(ri)
	}
	switch {
	case grpc:
		err.Meta().Set(pushbackHeader, strconv.FormatInt(ms, 10))
	case call.Spec.StreamType == connect.StreamTypeUnary:
		s, _ := edge.DelaySeconds(wait)
		err.Meta().Set(retryAfter, strconv.FormatInt(s, 10))
	}
	i.refusalFields(err, v)
	return err
}

// refusalFields sets the RateLimit fields of a refusal in err's metadata, when they are on.
func (i *interceptor) refusalFields(err *connect.Error, v *edge.Verdict) {
	if i.c.fields != nil && v.Outcome == edge.Refused {
		i.setFields(err.Meta(), v.Decision)
	}
}

// setFields sets the RateLimit fields of d in h, when d has them.
func (i *interceptor) setFields(h http.Header, d retryafter.Decision) {
	if q, p, ok := i.c.fields.Values(d); ok {
		h[rateLimit] = []string{q}
		h[rateLimitPolicy] = []string{p}
	}
}
