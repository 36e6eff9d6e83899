package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A script is one of the store's Lua scripts, each of whose calls Redis runs at most once: the
// scripts spend, charge and give back, and are not idempotent, so a call sent again after Redis
// ran it (go-redis retries a command or a pipeline after EOF, and a Cluster client after a
// network error, when a reset lost the reply: CLIENT KILL, a load balancer, a failover) would
// spend twice. Its commands tell go-redis never to send them again (see once); a Cluster
// client's MOVED and ASK redirects, which Redis did not run, still follow. A client that is not
// go-redis's gets script.Run's calls, and must not send a write twice itself (rueidis does not).
type script struct {
	*redis.Script
	src string
}

func newScript(src string) *script { return &script{Script: redis.NewScript(src), src: src} }

// once is a script command that go-redis sends no second time once it may have reached Redis.
type once struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (once) NoRetry() bool { return true }

// A processor is a client that sends any command, as go-redis's do.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// cmd returns the command that runs s on keys with args: EVALSHA, or EVAL (which loads the
// script) when full.
func (s *script) cmd(ctx context.Context, full bool, keys []string, args []any) *redis.Cmd {
	name, body := "evalsha", s.Hash()
	if full {
		name, body = "eval", s.src
	}
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

// run is script.Run, each command sent at most once: by EVALSHA, and by EVAL if the server had
// not the script.
func (s *script) run(ctx context.Context, client redis.Scripter, keys []string, args []any) *redis.Cmd {
	p, ok := client.(processor)
	if !ok {
		return s.Run(ctx, client, keys, args...)
	}
	cmd := s.cmd(ctx, false, keys, args)
	_ = p.Process(ctx, once{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = s.cmd(ctx, true, keys, args)
		_ = p.Process(ctx, once{cmd})
	}
	return cmd
}

// queue puts the call of s on keys with args into pipe, to be sent at most once: by EVALSHA, or
// by EVAL when full.
func (s *script) queue(ctx context.Context, pipe redis.Pipeliner, full bool, keys []string, args []any) *redis.Cmd {
	cmd := s.cmd(ctx, full, keys, args)
	_ = pipe.Process(ctx, once{cmd})
	return cmd
}
