package grpclimit

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"unsafe"
)

// peerKey returns the key of a TCP peer at a, as retryafter.ClientIP() keys it: an IPv4 address
// itself, an IPv6 address's /64, without the detour through text that the walk needs.
//
// A gRPC client calls again and again over one connection, so the key of a peer seen lately is
// taken from peerKeys rather than made again: one allocation less for each of its calls. A
// peer whose slot holds another's makes its key, one allocation as without peerKeys, and takes
// the slot.
func peerKey(a netip.Addr) string {
	if a.Is6() {
		a = netip.PrefixFrom(a, 64).Masked().Addr()
	}
	slot := &peerKeys[slotOf(a)]
	if k := slot.Load(); k != nil && k.addr == a {
		return k.key
	}
	k := &keptKey{addr: a}
	b := k.text[:0]
	if a.Is4() {
		b = a.AppendTo(b)
	} else {
		b = netip.PrefixFrom(a, 64).AppendTo(b)
	}
	// The key's bytes are the text of k, never written again: one allocation for both.
	k.key = unsafe.String(unsafe.SliceData(b), len(b))
	slot.Store(k)
	return k.key
}

// peerKeys holds the keys of the peers seen last, each in the slot its address hashes to. A
// peer's key is a function of its address alone, so every server shares them. Since a slot only
// spares making a key, an address that others are aimed at costs what it costs without it.
var peerKeys [1 << peerKeyBits]atomic.Pointer[keptKey]

// peerKeyBits is the log2 of the slots of peerKeys: 8 KiB of pointers, and up to 64 KiB of keys.
const peerKeyBits = 10

// A keptKey is the key of the peers at addr, an IPv4 address or an IPv6 /64 masked.
type keptKey struct {
	addr netip.Addr
	key  string // in text
	text [len("ffff:ffff:ffff:ffff::/64")]byte
}

// slotOf returns the slot of peerKeys for a: its 128 bits folded to 64 and hashed by Fibonacci
// hashing.
func slotOf(a netip.Addr) uint64 {
	b := a.As16()
	x := binary.LittleEndian.Uint64(b[:8]) ^ binary.LittleEndian.Uint64(b[8:])
	return x * 0x9e3779b97f4a7c15 >> (64 - peerKeyBits)
}
