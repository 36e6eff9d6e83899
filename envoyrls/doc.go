// Package envoyrls is Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService)
// over a retryafter.Limiter, configured by envoyproxy/ratelimit's YAML, read unchanged, and
// answering the exact wait.
//
//	cfg, err := envoyrls.Load("config/")
//	rlsv3.RegisterRateLimitServiceServer(grpcServer, envoyrls.New(cfg, envoyrls.Memory))
//
// A rule of N requests per unit is a token bucket of rate N/unit and burst N, not a fixed
// window: a client may spend N at once, and then one more each unit/N. A month is 30 days and
// a year 365, as envoyproxy/ratelimit counts them.
//
// Matching is envoyproxy/ratelimit's: at each level an entry matches its key and value, else
// the first wildcard value written that matches ("foo*", "a*b*c"), else its key without a
// value; the rule is the one at the level of the descriptor's last entry. A rule whose name
// another matched rule replaces is dropped; an unlimited rule, a descriptor no rule matches
// and an unknown domain are OK with no limit. Each rule is decided by its own limit, as
// envoyproxy/ratelimit decides it, even where two share its dotted name (Rule.ID: key "x.y",
// and key "y" under key "x"), which they then share only in the metrics.
//
// One request's descriptors are decided together: all admitted, or none charged. The cost is a
// descriptor's own hits_addend where set, 0 checking without counting (admitted while its
// client is not over the limit), else the request's, 0 meaning 1; descriptors that
// count against one client of one rule are decided as one of their summed cost, each answered
// with its decision, so that the wait covers all the request asks of that client. A refused
// descriptor's duration_until_reset is the exact wait rounded up to whole seconds, never 0,
// and the response adds Retry-After with the same value, so that a client that waits exactly
// that long is admitted; an admitted descriptor's is the time until its bucket is full. A
// request that can never be admitted (requests_per_unit: 0, or a cost above the burst) is
// OVER_LIMIT with no duration_until_reset and no Retry-After. A shadow_mode rule is decided as
// enforcement would, after the others admitted the request, and answered OK: a would-be
// refusal spends nothing and is reported to the decision hook as DryRunRefused; in a request
// the others refused it is not asked, and not reported.
//
// Load reads every file under a directory, in its subdirectories too and whatever its name, as
// envoyproxy/ratelimit's runtime loader does; Loader.IgnoreDotFiles is its
// RUNTIME_IGNOREDOTFILES. A file is read as envoyproxy/ratelimit reads it with gopkg.in/yaml.v2:
// merge keys ("<<: *anchor") merge, in yaml.v2's order; of a key written twice the last value
// is kept (two rate_limit mappings of one descriptor are merged field by field); dates,
// !!binary and unknown tags are strings; YAML 1.1's integers (010 is 8) and booleans (yes, on)
// are read; keys must be strings, values strings, integers, booleans or null.
//
// Differences from envoyproxy/ratelimit: quota_mode is refused at load, and so are a symbolic
// link to a directory under the configuration and a file that cannot be read, which it skips;
// detailed_metric, value_to_metric and metadata load and change nothing (metrics never carry a
// descriptor's value); a descriptor's limit override and negative hits are refused with
// INVALID_ARGUMENT, as are more than MaxDescriptors descriptors, MaxEntries entries a
// descriptor, or a domain longer than MaxLength bytes (a key or value longer than that counts
// by its SHA-256). More than 16 descriptors with a limit, or
// descriptors of different costs, are decided one retryafter.All after the other, giving back
// what was spent when a later one refuses, which needs a Limiter that is a retryafter.Charger
// (TokenBucket and redisstore.Store are).
package envoyrls
