package retryafter

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// hashSeed is the random seed of the hash a TokenBucket gives its keys: the low shardBits of a
// key's hash choose its part of the table, the bits above them its slot in the part's index, and
// the top 7 its tag. A client who does not know the seed cannot choose keys that meet in one part
// or one run of slots.
type hashSeed struct {
	seed   maphash.Seed
	k0, k1 uint64
}

func newHashSeed() hashSeed {
	return hashSeed{seed: maphash.MakeSeed(), k0: rand.Uint64(), k1: rand.Uint64()}
}

// sum returns the hash of key.
//
// A key of 8 to 16 bytes, an IPv4 address but the shortest, is read as its first and its last 8
// bytes, which overlap, and mixed with the seed by two rounds of the 128-bit multiply of wyhash
// (the runtime's own hash of strings where the CPU has no AES): about half the instructions of
// maphash.String on a key that short (30 against 64). Other keys go to maphash.String.
func (s *hashSeed) sum(key string) uint64 {
	n := len(key)
	if n < 8 || n > 16 {
		return maphash.String(s.seed, key)
	}
	first, last := words(key)
	return mix(mix(first^s.k0, last^s.k1)^uint64(n), s.k0^s.k1)
}

// words returns the first and the last 8 bytes of s, which has 8 to 16, as little-endian
// words; they overlap when s is shorter than 16. It reads them through array pointers, which
// the compiler does not check as it checks a slice of the string's bytes.
func words(s string) (first, last uint64) {
	p := unsafe.Pointer(unsafe.StringData(s))
	return binary.LittleEndian.Uint64((*[8]byte)(p)[:]),
		binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, len(s)-8))[:])
}

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
