package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The RateLimit and RateLimit-Policy fields are Structured Field Lists (RFC 9651). This file
// parses a List, with every kind of bare item RFC 9651 defines, and serialises one back, which
// the fuzz test uses to check that what parses survives a round trip.

// An sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplay
)

// sfBare is a bare item. An Integer or a Date is in n, a Decimal in n as thousandths; a String,
// a Token, a Display String (decoded UTF-8) and a Byte Sequence (decoded bytes) in s; a Boolean
// in b.
type sfBare struct {
	kind sfKind
	n    int64
	s    string
	b    bool
}

// An sfParam is one parameter of an item or an inner list.
type sfParam struct {
	key   string
	value sfBare
}

// An sfItem is a bare item with its parameters.
type sfItem struct {
	bare   sfBare
	params []sfParam
}

// An sfMember is a member of a List: an item, or an inner list of items (inner is then non-nil,
// possibly empty) with the inner list's parameters in params.
type sfMember struct {
	sfItem
	inner   []sfItem
	isInner bool
}

// param returns the value of the parameter key and whether it is present.
func (it *sfItem) param(key string) (sfBare, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.value, true
		}
	}
	return sfBare{}, false
}

// Limits of RFC 9651 §3.3.1 and §3.3.2.
const (
	sfMaxDecimalInt  = 12 // digits before the point
	sfMaxDecimalFrac = 3  // digits after it
)

var errSF = errors.New("not a Structured Field List")

// sfError is a parse error that says where the parse stopped.
func sfError(in string, rest string, what string) error {
	return fmt.Errorf("%w: %s at byte %d", errSF, what, len(in)-len(rest))
}

// parseSFList parses the field lines of a List field: the lines are combined with commas, as
// RFC 9651 §4.2 asks. A field with no lines, or only empty ones, is an empty List.
func parseSFList(lines []string) ([]sfMember, error) {
	in := strings.Join(lines, ",")
	p := sfParser{in: in, s: in}
	p.skipSP()
	var members []sfMember
	for p.s != "" {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		members = append(members, m)
		p.skipOWS()
		if p.s == "" {
			break
		}
		if p.s[0] != ',' {
			return nil, p.err("a comma or the end expected")
		}
		p.s = p.s[1:]
		p.skipOWS()
		if p.s == "" {
			return nil, p.err("a member expected after the comma")
		}
	}
	return members, nil
}

// An sfParser holds the input and what is left of it.
type sfParser struct {
	in, s string
}

func (p *sfParser) err(what string) error { return sfError(p.in, p.s, what) }

func (p *sfParser) skipSP() {
	for p.s != "" && p.s[0] == ' ' {
		p.s = p.s[1:]
	}
}

func (p *sfParser) skipOWS() {
	for p.s != "" && (p.s[0] == ' ' || p.s[0] == '\t') {
		p.s = p.s[1:]
	}
}

func (p *sfParser) member() (sfMember, error) {
	if p.s != "" && p.s[0] == '(' {
		return p.innerList()
	}
	it, err := p.item()
	return sfMember{sfItem: it}, err
}

func (p *sfParser) innerList() (sfMember, error) {
	p.s = p.s[1:] // '('
	m := sfMember{inner: []sfItem{}, isInner: true}
	for {
		p.skipSP()
		if p.s == "" {
			return m, p.err("an inner list not closed")
		}
		if p.s[0] == ')' {
			p.s = p.s[1:]
			params, err := p.params()
			m.params = params
			return m, err
		}
		it, err := p.item()
		if err != nil {
			return m, err
		}
		m.inner = append(m.inner, it)
		if p.s == "" || (p.s[0] != ' ' && p.s[0] != ')') {
			return m, p.err("a space or ')' expected in an inner list")
		}
	}
}

func (p *sfParser) item() (sfItem, error) {
	b, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	return sfItem{bare: b, params: params}, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var params []sfParam
	for p.s != "" && p.s[0] == ';' {
		p.s = p.s[1:]
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		value := sfBare{kind: sfBoolean, b: true}
		if p.s != "" && p.s[0] == '=' {
			p.s = p.s[1:]
			if value, err = p.bare(); err != nil {
				return nil, err
			}
		}
		params = setParam(params, key, value)
	}
	return params, nil
}

// setParam sets key to value in params, in place when key is there already (RFC 9651 §4.2.3.2:
// a repeated key overwrites the value and keeps its place).
func setParam(params []sfParam, key string, value sfBare) []sfParam {
	for i := range params {
		if params[i].key == key {
			params[i].value = value
			return params
		}
	}
	return append(params, sfParam{key: key, value: value})
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || (c >= 'A' && c <= 'Z') }

func (p *sfParser) key() (string, error) {
	if p.s == "" || !(isLCAlpha(p.s[0]) || p.s[0] == '*') {
		return "", p.err("a key expected")
	}
	i := 1
	for i < len(p.s) {
		c := p.s[i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, nil
}

func (p *sfParser) bare() (sfBare, error) {
	if p.s == "" {
		return sfBare{}, p.err("a value expected")
	}
	switch c := p.s[0]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.s = p.s[1:]
		b, err := p.number()
		if err == nil && b.kind != sfInteger {
			err = p.err("a Date must be an Integer")
		}
		b.kind = sfDate
		return b, err
	case c == '%':
		return p.display()
	}
	return sfBare{}, p.err("not the start of a value")
}

// number parses an Integer or a Decimal (RFC 9651 §4.2.4).
func (p *sfParser) number() (sfBare, error) {
	sign := p.sign()
	if !p.atDigit() {
		return sfBare{}, p.err("a digit expected")
	}
	intPart, intDigits := p.digits(15)
	if p.atDigit() {
		return sfBare{}, p.err("an Integer of more than 15 digits")
	}
	if p.s == "" || p.s[0] != '.' {
		return sfBare{kind: sfInteger, n: sign * intPart}, nil
	}
	if intDigits > sfMaxDecimalInt {
		return sfBare{}, p.err("a Decimal of more than 12 integer digits")
	}
	p.s = p.s[1:] // '.'
	frac, err := p.thousandths()
	if err != nil {
		return sfBare{}, err
	}
	return sfBare{kind: sfDecimal, n: sign * (intPart*1000 + frac)}, nil
}

// sign reads an optional '-' and returns the sign it gives, -1 or 1.
func (p *sfParser) sign() int64 {
	if p.s != "" && p.s[0] == '-' {
		p.s = p.s[1:]
		return -1
	}
	return 1
}

// atDigit reports whether what is left starts with a decimal digit.
func (p *sfParser) atDigit() bool { return p.s != "" && isDigit(p.s[0]) }

// digits reads at most most decimal digits and returns their value and how many there were.
func (p *sfParser) digits(most int) (n int64, count int) {
	for count < most && p.atDigit() {
		n = n*10 + int64(p.s[0]-'0')
		p.s = p.s[1:]
		count++
	}
	return n, count
}

// thousandths reads the one to three digits after a Decimal's point as thousandths.
func (p *sfParser) thousandths() (int64, error) {
	frac, n := p.digits(sfMaxDecimalFrac)
	switch {
	case p.atDigit():
		return 0, p.err("a Decimal of more than 3 fractional digits")
	case n == 0:
		return 0, p.err("a Decimal ending in its point")
	}
	for range sfMaxDecimalFrac - n {
		frac *= 10
	}
	return frac, nil
}

func (p *sfParser) str() (sfBare, error) {
	p.s = p.s[1:] // '"'
	var b strings.Builder
	for p.s != "" {
		c := p.s[0]
		p.s = p.s[1:]
		switch {
		case c == '\\':
			if p.s == "" || (p.s[0] != '"' && p.s[0] != '\\') {
				return sfBare{}, p.err("a String with a bad escape")
			}
			b.WriteByte(p.s[0])
			p.s = p.s[1:]
		case c == '"':
			return sfBare{kind: sfString, s: b.String()}, nil
		case c < 0x20 || c > 0x7e:
			return sfBare{}, p.err("a String with a character outside printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return sfBare{}, p.err("a String not closed")
}

// isTchar reports whether c is a tchar of RFC 9110 §5.6.2.
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) token() sfBare {
	i := 1
	for i < len(p.s) && (isTchar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
		i++
	}
	t := p.s[:i]
	p.s = p.s[i:]
	return sfBare{kind: sfToken, s: t}
}

func (p *sfParser) bytes() (sfBare, error) {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		return sfBare{}, p.err("a Byte Sequence not closed")
	}
	enc := p.s[1 : 1+end]
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
			return sfBare{}, p.err("a Byte Sequence with a character outside base64")
		}
	}
	// RFC 9651 §4.2.7: parsers should accept a Byte Sequence without its "=" padding.
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil && !strings.Contains(enc, "=") {
		dec, err = base64.RawStdEncoding.DecodeString(enc)
	}
	if err != nil {
		return sfBare{}, p.err("a Byte Sequence that is not base64")
	}
	p.s = p.s[2+end:]
	return sfBare{kind: sfBytes, s: string(dec)}, nil
}

func (p *sfParser) boolean() (sfBare, error) {
	if len(p.s) < 2 || (p.s[1] != '0' && p.s[1] != '1') {
		return sfBare{}, p.err("a Boolean must be ?0 or ?1")
	}
	b := p.s[1] == '1'
	p.s = p.s[2:]
	return sfBare{kind: sfBoolean, b: b}, nil
}

func (p *sfParser) display() (sfBare, error) {
	if len(p.s) < 2 || p.s[1] != '"' {
		return sfBare{}, p.err("a Display String must start with %\"")
	}
	p.s = p.s[2:]
	var b []byte
	for p.s != "" {
		c := p.s[0]
		switch {
		case c < 0x20 || c > 0x7e:
			return sfBare{}, p.err("a Display String with a character outside printable ASCII")
		case c == '%':
			if len(p.s) < 3 {
				return sfBare{}, p.err("a Display String with a short escape")
			}
			v, ok := lowerHex(p.s[1:3])
			if !ok {
				return sfBare{}, p.err("a Display String with a bad escape")
			}
			b = append(b, v)
			p.s = p.s[3:]
		case c == '"':
			p.s = p.s[1:]
			if !utf8.Valid(b) {
				return sfBare{}, p.err("a Display String that is not UTF-8")
			}
			return sfBare{kind: sfDisplay, s: string(b)}, nil
		default:
			b = append(b, c)
			p.s = p.s[1:]
		}
	}
	return sfBare{}, p.err("a Display String not closed")
}

// lowerHex parses two lower-case hex digits.
func lowerHex(s string) (byte, bool) {
	var v byte
	for i := 0; i < 2; i++ {
		c := s[i]
		switch {
		case isDigit(c):
			v = v<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// serializeSFList serialises members as RFC 9651 §4.1 does. It assumes members came from
// parseSFList, so every value is in range.
func serializeSFList(members []sfMember) string {
	var b strings.Builder
	for i, m := range members {
		if i > 0 {
			b.WriteString(", ")
		}
		if m.isInner {
			b.WriteByte('(')
			for j, it := range m.inner {
				if j > 0 {
					b.WriteByte(' ')
				}
				writeSFItem(&b, it)
			}
			b.WriteByte(')')
			writeSFParams(&b, m.params)
			continue
		}
		writeSFItem(&b, m.sfItem)
	}
	return b.String()
}

func writeSFItem(b *strings.Builder, it sfItem) {
	writeSFBare(b, it.bare)
	writeSFParams(b, it.params)
}

func writeSFParams(b *strings.Builder, params []sfParam) {
	for _, p := range params {
		b.WriteByte(';')
		b.WriteString(p.key)
		if p.value.kind == sfBoolean && p.value.b {
			continue
		}
		b.WriteByte('=')
		writeSFBare(b, p.value)
	}
}

// writeSFBare serialises the bare item v as RFC 9651 §4.1.3.1 does.
func writeSFBare(b *strings.Builder, v sfBare) {
	switch v.kind {
	case sfInteger:
		b.WriteString(strconv.FormatInt(v.n, 10))
	case sfDate:
		b.WriteByte('@')
		b.WriteString(strconv.FormatInt(v.n, 10))
	case sfDecimal:
		writeSFDecimal(b, v.n)
	case sfString:
		writeSFString(b, v.s)
	case sfToken:
		b.WriteString(v.s)
	case sfBytes:
		b.WriteByte(':')
		b.WriteString(base64.StdEncoding.EncodeToString([]byte(v.s)))
		b.WriteByte(':')
	case sfBoolean:
		if v.b {
			b.WriteString("?1")
		} else {
			b.WriteString("?0")
		}
	case sfDisplay:
		writeSFDisplay(b, v.s)
	}
}

// writeSFDecimal serialises the Decimal of n thousandths with the fewest fractional digits, at
// least one.
func writeSFDecimal(b *strings.Builder, n int64) {
	if n < 0 {
		b.WriteByte('-')
		n = -n
	}
	b.WriteString(strconv.FormatInt(n/1000, 10))
	b.WriteByte('.')
	frac := strings.TrimRight(strconv.FormatInt(1000+n%1000, 10)[1:], "0")
	if frac == "" {
		frac = "0"
	}
	b.WriteString(frac)
}

// writeSFString serialises s as a String, escaping its quotes and backslashes.
func writeSFString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}

// writeSFDisplay serialises s as a Display String, percent-encoding '%', '"' and every byte
// outside printable ASCII.
func writeSFDisplay(b *strings.Builder, s string) {
	b.WriteString(`%"`)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '"' || c < 0x20 || c > 0x7e {
			fmt.Fprintf(b, "%%%02x", c)
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
}
