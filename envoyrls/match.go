package envoyrls

import (
	"crypto/sha256"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Match returns the rule of domain that decides descriptor, and the key of its client: nil
// when none does (no rule, or an unknown domain), as envoyproxy/ratelimit's GetLimit matches.
// At each level of the tree an entry matches the key and value written, else the first
// wildcard value written that matches, else the key written without a value; the rule is the
// one at the level of the descriptor's last entry.
//
// The key names the rule by its identity (its domain and path, never shared with another rule,
// where its ID may be) and the client by the descriptor's values, but for a share_threshold
// wildcard, where every matching value is one client.
func (c *Config) Match(domain string, descriptor *ratelimitv3.RateLimitDescriptor) (r *Rule, key string) {
	l := c.domains[domain]
	if l == nil {
		return nil, ""
	}
	entries := descriptor.GetEntries()
	var b []byte
	for i, e := range entries {
		final := e.GetKey() + "_" + e.GetValue()
		next := l.children[final]
		wild := false
		if next == nil {
			for _, w := range l.wildcards {
				if wildcardMatch(w.parts, final) {
					next, wild = l.children[w.key], true
					break
				}
			}
		}
		if next == nil {
			next = l.children[e.GetKey()]
		}
		if next == nil {
			break
		}
		value := e.GetValue()
		if wild && next.share {
			value = next.pattern
		}
		b = appendField(appendField(b, short(e.GetKey())), short(value))
		if i == len(entries)-1 && next.rule != nil {
			r = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		l = next
	}
	if r == nil {
		return nil, ""
	}
	return r, string(appendField(nil, r.key)) + string(b)
}

// short returns s, or its SHA-256 when it is longer than MaxLength: what a client's key holds
// of a descriptor's key or value.
func short(s string) string {
	if len(s) <= MaxLength {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return string(sum[:])
}

// appendField appends s to b, its length first, so that no two lists of fields make one key.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// ruleID returns the identity of the rule that key (made by Match) names, as Config.ruleOf
// finds it, and false for a key that Match did not make.
func ruleID(key string) (string, bool) {
	n, rest, ok := strings.Cut(key, ":")
	if !ok {
		return "", false
	}
	size, err := strconv.Atoi(n)
	if err != nil || size < 0 || size > len(rest) {
		return "", false
	}
	return rest[:size], true
}

// wildcardMatch reports whether value matches a pattern split at its stars, each star
// matching any run of bytes, as envoyproxy/ratelimit's wildcardMatch.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(value) < fixed {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Rule returns the rule of c whose ID is id, or nil: of two rules that share it, the first
// loaded.
func (c *Config) Rule(id string) *Rule { return c.ids[id] }

// ruleOf returns the rule of c whose identity (Rule.key) is identity, as a key that Match
// returns leads with it, or nil.
func (c *Config) ruleOf(identity string) *Rule { return c.rules[identity] }
