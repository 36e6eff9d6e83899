package retryafter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func decide(t *testing.T, b *TokenBucket, key string, cost int, now time.Time) Decision {
	t.Helper()
	d, err := b.Decide(context.Background(), key, cost, now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTokenBucketCostAboveBurst(t *testing.T) {
	b := NewTokenBucket(10, 3)
	if d := decide(t, b, "k", 4, t0); d.Allowed || d.RetryAfter != rate.InfDuration {
		t.Fatalf("cost 4 with burst 3: %+v, want refused forever", d)
	}
	if d := decide(t, b, "k", 3, t0); !d.Allowed {
		t.Fatalf("cost 3 with burst 3 after a refusal: %+v, want allowed (the refusal cost nothing)", d)
	}
	if d := decide(t, b, "k", 2, t0); d.Allowed || d.RetryAfter != 200*time.Millisecond-slack {
		t.Fatalf("cost 2 on an empty bucket at 10/s: %+v, want a wait of 200ms", d)
	}
}

// TestTokenBucketReclaimsRefilledKeys floods the bucket with distinct keys while time passes:
// the keys whose bucket has refilled are dropped, so the table stays small.
func TestTokenBucketReclaimsRefilledKeys(t *testing.T) {
	b := NewTokenBucket(1, 1)
	now := t0
	for i := range 200_000 {
		now = now.Add(time.Millisecond)
		if d := decide(t, b, fmt.Sprint(i), 1, now); !d.Allowed {
			t.Fatalf("new key %d refused", i)
		}
	}
	// A bucket refills in 1 s: 1,000 keys are live at any instant, plus what each part of the
	// table lets grow before it sweeps.
	if n := b.Len(); n > 1000+shardCount*128 {
		t.Fatalf("%d keys held after 200,000 clients of which 1,000 are live", n)
	}
}

// TestTokenBucketAtTheBound fills the table with keys that are all over their limit: a new key
// is then refused with the time until a slot frees, and no key already held is forgotten, so no
// client over its limit is admitted to make room.
func TestTokenBucketAtTheBound(t *testing.T) {
	const maxKeys = shardCount * 4
	b := NewTokenBucket(rate.Every(10*time.Second), 1, WithMaxKeys(maxKeys))
	var held []string
	refusedNew := 0
	for i := range 10 * maxKeys {
		key := fmt.Sprint("client-", i)
		d := decide(t, b, key, 1, t0)
		switch {
		case d.Allowed:
			held = append(held, key)
		case d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second:
			t.Fatalf("new key refused with RetryAfter %v, want (0, 10s]", d.RetryAfter)
		default:
			refusedNew++
		}
	}
	if b.Len() > maxKeys || len(held) != b.Len() {
		t.Fatalf("held %d keys, admitted %d, bound %d", b.Len(), len(held), maxKeys)
	}
	if refusedNew == 0 {
		t.Fatal("no new key was refused at the bound")
	}
	for _, key := range held {
		if d := decide(t, b, key, 1, t0.Add(5*time.Second)); d.Allowed {
			t.Fatalf("%s, over its limit, was admitted after the table filled", key)
		}
	}
	// Once the buckets have refilled, their slots are free for new keys.
	if d := decide(t, b, "late-comer", 1, t0.Add(10*time.Second)); !d.Allowed {
		t.Fatalf("new key refused after every bucket refilled: %+v", d)
	}
}

// TestTokenBucketTinyRateKeepsKeys checks that a rate so slow that a bucket's refill time does
// not fit a Duration never makes a key look refilled (and so forgotten).
func TestTokenBucketTinyRateKeepsKeys(t *testing.T) {
	for _, limit := range []rate.Limit{0, 1e-12, 1e-300} {
		b := NewTokenBucket(limit, 1000, WithMaxKeys(shardCount))
		decide(t, b, "spender", 1000, t0)
		for i := range 200 {
			decide(t, b, fmt.Sprint("new-", i), 1, t0.Add(time.Duration(i)*time.Hour))
		}
		if d := decide(t, b, "spender", 1, t0.Add(200*time.Hour)); d.Allowed {
			t.Fatalf("limit %v: the key that spent its burst was forgotten and admitted", limit)
		}
	}
}

// TestTokenBucketConcurrentRefusals refuses many requests on one key at the same instant from
// many goroutines: each must be told the same exact wait, the time to the next token, and none
// may cost quota, so that at that instant exactly one request is admitted. Deciding in steps
// (allow, reserve, cancel) without holding the key makes a refusal see another's reservation
// (a wait one token too long) or cancel after it (a token lost for good).
func TestTokenBucketConcurrentRefusals(t *testing.T) {
	const goroutines = 8
	for round := range 300 {
		b := NewTokenBucket(rate.Every(time.Second), 1)
		now := t0.Add(time.Duration(round) * time.Hour)
		decide(t, b, "k", 1, now) // spend the burst
		var wg sync.WaitGroup
		waits := make([]Decision, goroutines)
		start := make(chan struct{})
		for i := range waits {
			wg.Go(func() {
				<-start
				d, err := b.Decide(context.Background(), "k", 1, now)
				if err != nil {
					t.Error(err)
				}
				waits[i] = d
			})
		}
		close(start)
		wg.Wait()
		for i, d := range waits {
			if d.Allowed || d.RetryAfter != time.Second-slack {
				t.Fatalf("round %d, request %d: %+v, want refused with a wait of 1s", round, i, d)
			}
		}
		next := now.Add(time.Second)
		if d := decide(t, b, "k", 1, next); !d.Allowed {
			t.Fatalf("round %d: refused at the next token (%+v): a refusal cost quota", round, d)
		}
		if d := decide(t, b, "k", 1, next); d.Allowed {
			t.Fatalf("round %d: two admitted for one token", round)
		}
	}
}

// BenchmarkTokenBucketDecide measures a decision from many goroutines, each on keys of its own
// (the common case) and all on one key that is over its limit (the herd).
func BenchmarkTokenBucketDecide(b *testing.B) {
	b.Run("own keys", func(b *testing.B) {
		tb := NewTokenBucket(1e9, 1<<30)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = fmt.Sprint(next.Add(1))
			}
			for i := 0; pb.Next(); i++ {
				tb.Decide(context.Background(), keys[i%len(keys)], 1, t0)
			}
		})
	})
	b.Run("one key refused", func(b *testing.B) {
		tb := NewTokenBucket(rate.Every(time.Hour), 1)
		tb.Decide(context.Background(), "k", 1, t0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tb.Decide(context.Background(), "k", 1, t0)
			}
		})
	})
}
