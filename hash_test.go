package retryafter

import (
	"math"
	"strconv"
	"testing"
)

// TestHashSpreadsKeys hashes 200,000 IPv4 addresses, the keys the short hash is for, and keys of
// every length around it, with fresh seeds: no two keys share a hash, every bit that chooses a
// part, a slot or a tag is 1 for half the keys, and the parts hold as many keys each as chance
// allows.
func TestHashSpreadsKeys(t *testing.T) {
	const n = 200_000
	for round := range 3 {
		s := newHashSeed()
		seen := make(map[uint64]string, n)
		var ones [64]int
		var parts [shardCount]int
		for i := range n {
			k := clientAddr(i)
			if round == 2 {
				k = (strconv.Itoa(i) + clientAddr(i) + "-padding-to-twenty")[:1+i%20] // from 1 to 20 bytes
			}
			h := s.sum(k)
			if other, ok := seen[h]; ok {
				if other != k {
					t.Fatalf("round %d: %q and %q share the hash %#x", round, other, k, h)
				}
				continue // a short key made twice
			}
			seen[h] = k
			for b := range 64 {
				ones[b] += int(h >> b & 1)
			}
			parts[h%shardCount]++
		}
		keys := len(seen)
		for b, c := range ones {
			if f := float64(c) / float64(keys); math.Abs(f-0.5) > 0.01 {
				t.Fatalf("round %d: bit %d is 1 for %.3f of %d keys", round, b, f, keys)
			}
		}
		// Chi-square of the parts, 63 degrees of freedom: above 130 has odds below 1e-6.
		want := float64(keys) / shardCount
		chi := 0.0
		for _, c := range parts {
			chi += (float64(c) - want) * (float64(c) - want) / want
		}
		if chi > 130 {
			t.Fatalf("round %d: the parts hold %v keys (chi-square %.0f)", round, parts, chi)
		}
	}
}

// TestHashCountsTheLength hashes keys of 8 bytes and the same bytes twice: read as their first and
// last 8 bytes, both are the same two words, and only the length tells them apart.
func TestHashCountsTheLength(t *testing.T) {
	s := newHashSeed()
	for i := range 1000 {
		k := clientAddr(i)[:8]
		if s.sum(k) == s.sum(k+k) {
			t.Fatalf("%q and %q share a hash", k, k+k)
		}
	}
}

// TestHashReadsEveryByte changes each byte of keys of every length to 48 in turn: every change
// moves the hash. A hash that read only a key's ends, as the short keys' does, would let keys
// that differ only in their middle (a user name after a long prefix) fall in one run of slots.
func TestHashReadsEveryByte(t *testing.T) {
	s := newHashSeed()
	for n := 1; n <= 48; n++ {
		key := []byte((clientAddr(n) + "/a-key-of-many-bytes-for-every-length-to-48")[:n])
		h := s.sum(string(key))
		for i := range key {
			key[i] ^= 0x20
			if s.sum(string(key)) == h {
				t.Fatalf("%d bytes: changing byte %d of %q left its hash", n, i, key)
			}
			key[i] ^= 0x20
		}
	}
}

// TestHashDependsOnSeed checks that two seeds put the same keys in different parts: a client who
// does not know the seed cannot choose keys that meet in one part.
func TestHashDependsOnSeed(t *testing.T) {
	a, b := newHashSeed(), newHashSeed()
	same := 0
	for i := range 10_000 {
		k := clientAddr(i)
		if a.sum(k)%shardCount == b.sum(k)%shardCount {
			same++
		}
	}
	if same > 10_000/shardCount*2 {
		t.Fatalf("%d of 10000 keys in the same part under two seeds, want about %d", same, 10_000/shardCount)
	}
}
