// Package rueidisstore builds a [redisstore.Store] that reaches Redis through rueidis, whose
// auto-pipelining sends the commands of concurrent decisions together on shared connections, as
// the store shares round trips over go-redis (redisstore/BENCHMARKS.md has both side by side),
// and unlike go-redis's own AutoPipeliner it holds the store's timeout.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	r.Use(retryafter.LimitWith(rueidisstore.New(client, rate.Every(200*time.Millisecond), 10)))
//
// It is a module of its own, so that users of go-redis never carry rueidis. Its users carry
// go-redis's code, not its connections: the store's engine, one for both clients, takes
// go-redis's redis.Scripter, which this package implements over rueidis.
package rueidisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter/redisstore"
)

// New returns a [redisstore.Store] as [redisstore.New] does, with the same options, reaching
// Redis through client: a rueidis.Client of one server or of a Redis Cluster (rueidis finds out
// which). On a cluster, the store knows Redis up or down as a whole, not master by master as it
// does over a go-redis ClusterClient. Stores over one client decide the layers of a
// retryafter.All in one script only when their prefixes carry one hash tag, even on one server,
// which the store cannot tell from a cluster (see [redisstore.Store.Combine]). The client stays
// the caller's. It panics if client is nil, and as redisstore.New does.
func New(client rueidis.Client, limit rate.Limit, burst int, opts ...redisstore.Option) *redisstore.Store {
	if client == nil {
		panic("rueidisstore: New with a nil client")
	}
	return redisstore.New(scripter{client}, limit, burst, opts...)
}

// scripter is a redis.Scripter over a rueidis.Client. rueidis bounds a command by its context's
// deadline, which is how the store's timeout reaches it.
type scripter struct{ c rueidis.Client }

func (s scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "EVAL", script, keys, args)
}

func (s scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "EVALSHA", sha1, keys, args)
}

func (s scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "EVAL_RO", script, keys, args)
}

func (s scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "EVALSHA_RO", sha1, keys, args)
}

// eval runs a script command and returns its answer as go-redis would: an integer (what the
// store's charge answers) as an int64, an array of integers (what its decisions answer) as []any
// of int64, NOSCRIPT as an error wrapping redis.ErrNoScript, so that redis.Script.Run sends
// the script itself, and other error replies as a redis.Error.
func (s scripter) eval(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	strs := make([]string, len(args))
	for i, a := range args {
		strs[i] = argString(a)
	}
	cmd := s.c.B().Arbitrary(name, script, strconv.Itoa(len(keys))).Keys(keys...).Args(strs...).Build()
	msg, err := s.c.Do(ctx, cmd).ToMessage()
	if err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			if re.IsNoScript() {
				err = fmt.Errorf("%w: %w", redis.ErrNoScript, err)
			} else {
				err = replyError{err}
			}
		}
		return redis.NewCmdResult(nil, err)
	}
	if msg.IsInt64() {
		n, err := msg.AsInt64()
		return redis.NewCmdResult(n, err)
	}
	ints, err := msg.AsIntSlice()
	if err != nil {
		return redis.NewCmdResult(nil, err)
	}
	vals := make([]any, len(ints))
	for i, v := range ints {
		vals[i] = v
	}
	return redis.NewCmdResult(vals, nil)
}

// replyError is an error reply of Redis's, marked as go-redis marks its own (redis.Error), so
// that the store tells a key's failure (WRONGTYPE, KEYSTATE: see redisstore.ErrKeyState) from
// Redis's.
type replyError struct{ err error }

func (e replyError) Error() string { return e.err.Error() }
func (e replyError) Unwrap() error { return e.err }
func (replyError) RedisError()     {}

// argString formats an argument of a script as go-redis would send it.
func argString(a any) string {
	switch v := a.(type) {
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		return v
	}
	return fmt.Sprint(a)
}

func (s scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	msgs, err := s.c.Do(ctx, s.c.B().ScriptExists().Sha1(hashes...).Build()).ToArray()
	if err != nil {
		return redis.NewBoolSliceResult(nil, err)
	}
	exists := make([]bool, len(msgs))
	for i, m := range msgs {
		n, err := m.AsInt64()
		if err != nil {
			return redis.NewBoolSliceResult(nil, err)
		}
		exists[i] = n == 1
	}
	return redis.NewBoolSliceResult(exists, nil)
}

func (s scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	sha, err := s.c.Do(ctx, s.c.B().ScriptLoad().Script(script).Build()).ToString()
	return redis.NewStringResult(sha, err)
}
