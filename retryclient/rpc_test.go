package retryclient

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// TestRPCDo: a call is tried again only when its server asked for a wait, within MaxWait and
// the deadline, and at most MaxAttempts times; a context that ends during the wait is given to
// ended.
func TestRPCDo(t *testing.T) {
	refused := errors.New("refused")
	for _, tt := range []struct {
		name     string
		p        RPC
		wait     time.Duration
		ok       bool
		deadline time.Duration // 0: none
		tries    int
	}{
		{"retried up to the attempts", RPC{MaxAttempts: 3, MaxWait: time.Second}, 0, true, 0, 3},
		{"no wait asked", RPC{MaxAttempts: 3, MaxWait: time.Second}, time.Millisecond, false, 0, 1},
		{"a wait above MaxWait", RPC{MaxAttempts: 3, MaxWait: time.Second}, 2 * time.Second, true, 0, 1},
		{"a wait past the deadline", RPC{MaxAttempts: 3, MaxWait: time.Hour}, time.Minute, true, time.Second, 1},
		{"one attempt", RPC{MaxAttempts: 1, MaxWait: time.Second}, time.Millisecond, true, 0, 1},
	} {
		ctx := context.Background()
		if tt.deadline > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tt.deadline)
			defer cancel()
		}
		tries := 0
		err := tt.p.Do(ctx, func() (time.Duration, bool, error) {
			tries++
			return tt.wait, tt.ok, refused
		}, func(err error) error { return err })
		if tries != tt.tries || err != refused {
			t.Errorf("%s: %d tries, %v; want %d tries and the call's error", tt.name, tries, err, tt.tries)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := errors.New("ended")
	err := RPC{MaxAttempts: 2, MaxWait: time.Hour}.Do(ctx, func() (time.Duration, bool, error) {
		cancel()
		return time.Minute, true, refused
	}, func(error) error { return ended })
	if err != ended {
		t.Errorf("a context ended during the wait: %v, want ended's error", err)
	}
}

// TestPushback reads the pushback as grpc-go does.
func TestPushback(t *testing.T) {
	for _, tt := range []struct {
		v     []string
		wait  time.Duration
		retry bool
	}{
		{[]string{"1500"}, 1500 * time.Millisecond, true},
		{[]string{"0"}, 0, true},
		{[]string{"-1"}, 0, false},
		{[]string{"1.5"}, 0, false},
		{[]string{""}, 0, false},
		{[]string{"1", "2"}, 0, false},
		{nil, 0, false},
		{[]string{"99999999999999999999"}, math.MaxInt64, true},
	} {
		if wait, retry := Pushback(tt.v); wait != tt.wait || retry != tt.retry {
			t.Errorf("Pushback(%q) = %v, %v; want %v, %v", tt.v, wait, retry, tt.wait, tt.retry)
		}
	}
}

// TestRPCMillisecondWithinMaxWait: a wait of 0 counts as a millisecond, which a MaxWait below
// it does not allow: Do returns the error without waiting. It once waited the millisecond,
// checked against MaxWait before it was raised.
func TestRPCMillisecondWithinMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("refused")
		p := RPC{MaxAttempts: 2, MaxWait: 500 * time.Microsecond}
		tries := 0
		start := time.Now()
		err := p.Do(context.Background(), func() (time.Duration, bool, error) {
			tries++
			return 0, true, refused
		}, func(err error) error { return err })
		if err != refused || tries != 1 || time.Since(start) != 0 {
			t.Fatalf("%v after %d tries and %v, want the refusal after one try and no wait", err, tries, time.Since(start))
		}
	})
}
