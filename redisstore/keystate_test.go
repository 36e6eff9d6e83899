package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// foreignValues puts under prefix, one key each, values of another program that are no
// limiter's state, and returns their keys (without the prefix).
func foreignValues(t *testing.T, client *redis.Client, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	values := map[string]func(key string) error{
		"hash":    func(k string) error { return client.HSet(ctx, k, "field", "value").Err() },
		"list":    func(k string) error { return client.RPush(ctx, k, "a", "b").Err() },
		"word":    func(k string) error { return client.Set(ctx, k, "hello", 0).Err() },
		"short":   func(k string) error { return client.Set(ctx, k, "7", 0).Err() },
		"counter": func(k string) error { return client.Set(ctx, k, "12345", 0).Err() },
		"float":   func(k string) error { return client.Set(ctx, k, "1.5", 0).Err() },
		"tagged":  func(k string) error { return client.Set(ctx, k, "1234567:x:y", 0).Err() },
		"colon":   func(k string) error { return client.Set(ctx, k, "1234567:", 0).Err() },
		"json":    func(k string) error { return client.Set(ctx, k, `{"n":1}`, 0).Err() },
		"huge":    func(k string) error { return client.Set(ctx, k, "99999999999999999999999", 0).Err() },
		"hugedot": func(k string) error { return client.Set(ctx, k, "99999999999999999999.1234567", 0).Err() },
	}
	var keys []string
	for name, set := range values {
		if err := set(prefix + name); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, name)
	}
	return keys
}

// dump returns the value of key in Redis as DUMP serialises it, to tell whether it changed.
func dump(t *testing.T, client *redis.Client, key string) string {
	t.Helper()
	v, err := client.Dump(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("DUMP %s: %v", key, err)
	}
	return v
}

// TestKeyStateIsTheKeys puts values of another program under the store's prefix, and asks for
// them, far more times in a row than take Redis for down, by every way to Redis (a decision, a
// charge, a held charge flushed, the decision of several layers, a lease): each fails with
// ErrKeyState and not ErrUnavailable, Redis is not taken for down, a healthy key is decided as
// usual in between and after, and the values are untouched.
func TestKeyStateIsTheKeys(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	prefix := testPrefix(t)
	ctx := context.Background()
	s := New(client, rate.Every(time.Second), 5, WithPrefix(prefix), WithTimeout(testTimeout), WithLocalFallback(2),
		WithDeferredCharges(time.Hour))
	other := New(client, rate.Every(time.Second), 5, WithPrefix(prefix+"other:"), WithTimeout(testTimeout))
	all := retryafter.All(s, other)
	leased := s.Leased(2)
	bad := foreignValues(t, client, prefix)
	before := map[string]string{}
	for _, k := range bad {
		before[k] = dump(t, client, prefix+k)
	}

	wantKeyState := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrKeyState) || errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v, want ErrKeyState and not ErrUnavailable", what, err)
		}
	}
	healthy := 0
	for i := range 2 * downAfter {
		for _, k := range bad {
			d, err := s.Decide(ctx, k, 1, t0)
			wantKeyState(fmt.Sprintf("Decide(%s) #%d = %+v", k, i, d), err)
			wantKeyState("Decide at cost 0 of "+k, func() error { _, err := s.Decide(ctx, k, 0, t0); return err }())
			wantKeyState("Charge(-1) of "+k, s.Charge(ctx, k, -1, t0))
			if err := s.Charge(ctx, k, 1, t0); err != nil { // held back
				t.Errorf("held Charge of %s: %v", k, err)
			}
			wantKeyState("Flush with "+k, s.Flush(ctx))
			wantKeyState("All of "+k, func() error { _, err := all.Decide(ctx, k, 1, t0); return err }())
			wantKeyState("Leased of "+k, func() error { _, err := leased.Decide(ctx, k, 1, t0); return err }())
			if d := decide(t, s, fmt.Sprintf("healthy-%d", healthy), 1, t0); !d.Allowed {
				t.Errorf("a healthy key refused: %+v", d)
			}
			healthy++
		}
	}
	if err := s.Down(); err != nil || s.FallingBack() {
		t.Errorf("Down() = %v, FallingBack() = %v after keys of other programs", err, s.FallingBack())
	}
	if err := s.Flush(ctx); err != nil {
		t.Errorf("Flush after the charges of those keys were dropped: %v", err)
	}
	for _, k := range bad {
		if got := dump(t, client, prefix+k); got != before[k] {
			t.Errorf("the value of %s changed", k)
		}
	}
}

// TestKeyStateClassified holds the one place that tells a key's failure from Redis's to its
// reading of Redis's error replies, each given by a real Redis: a value of the wrong type or
// not a state is the key's; a server out of memory, read-only, loading or busy is Redis's.
func TestKeyStateClassified(t *testing.T) {
	client := newClient(t, sharedAddr(t))
	for _, c := range []struct {
		reply string
		key   bool
	}{
		{"WRONGTYPE Operation against a key holding the wrong kind of value script: 0fd1, on @user_script:1.", true},
		{"KEYSTATE retryafter:k holds no limiter state", true},
		{"OOM command not allowed when used memory > 'maxmemory'.", false},
		{"READONLY You can't write against a read only replica.", false},
		{"LOADING Redis is loading the dataset in memory", false},
		{"BUSY Redis is busy running a script.", false},
		{"ERR user_script:1: attempt to perform arithmetic on a nil value", false},
	} {
		err := client.Eval(context.Background(), "return redis.error_reply(ARGV[1])", nil, c.reply).Err()
		if err == nil || err.Error() != c.reply {
			t.Fatalf("Redis replied %v, want %q", err, c.reply)
		}
		err = fmt.Errorf("wrapped: %w", err)
		if got := isKeyState(err); got != c.key {
			t.Errorf("isKeyState(%q) = %v, want %v", c.reply, got, c.key)
		}
	}
	if isKeyState(errors.New("KEYSTATE not from Redis")) {
		t.Error("an error not from Redis taken for a key's")
	}
}

// TestServerStateIsRedis turns a Redis of the test's own out of memory (maxmemory 1 with
// noeviction), or into a read-only replica of a master it cannot reach: a decision that writes
// fails with ErrUnavailable, not ErrKeyState, and three in a row take Redis for down, for every
// key, as the state of the server, not of a key, should.
func TestServerStateIsRedis(t *testing.T) {
	for _, state := range []string{"out of memory", "read-only replica"} {
		t.Run(state, func(t *testing.T) {
			ctx := context.Background()
			client := newClient(t, startServer(t).Addr())
			s := New(client, rate.Every(time.Second), 5, WithPrefix(testPrefix(t)), WithTimeout(testTimeout), WithProbeInterval(time.Hour))
			if d := decide(t, s, "before", 1, t0); !d.Allowed {
				t.Fatalf("before: %+v", d)
			}
			if state == "out of memory" {
				if err := client.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
					t.Fatal(err)
				}
				if err := client.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
					t.Fatal(err)
				}
			} else if err := client.ReplicaOf(ctx, "127.0.0.1", "1").Err(); err != nil {
				t.Fatal(err)
			}
			for i := range downAfter {
				_, err := s.Decide(ctx, fmt.Sprint("k", i), 1, t0)
				if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrKeyState) {
					t.Fatalf("decision %d: %v, want ErrUnavailable", i, err)
				}
			}
			if s.Down() == nil {
				t.Fatalf("Redis not taken for down after %d decisions failed on its state", downAfter)
			}
		})
	}
}
