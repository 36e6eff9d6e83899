package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSFList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // the list serialised again; "" with ok false: must not parse
		ok   bool
	}{
		{`"default";r=0;t=1`, `"default";r=0;t=1`, true},
		{`"default";q=5;w=5, "daily";q=1000;w=86400`, `"default";q=5;w=5, "daily";q=1000;w=86400`, true},
		{`  "a" ,	"b"`, `"a", "b"`, true},
		{``, ``, true},
		{`1, 42, -7, 999999999999999`, `1, 42, -7, 999999999999999`, true},
		{`1.5, -0.25, 3.0, 123456789012.123`, `1.5, -0.25, 3.0, 123456789012.123`, true},
		{`"say \"hi\" \\ bye"`, `"say \"hi\" \\ bye"`, true},
		{`tok, *star, a:b/c`, `tok, *star, a:b/c`, true},
		{`:aGVsbG8=:, :aGVsbG8:`, `:aGVsbG8=:, :aGVsbG8=:`, true},
		{`?1, ?0, @1659578233`, `?1, ?0, @1659578233`, true},
		{`%"f%c3%bc%c3%bc"`, `%"f%c3%bc%c3%bc"`, true},
		{`("a" "b");lvl=5, ()`, `("a" "b");lvl=5, ()`, true},
		{`x;a;b=?0;c=?1`, `x;a;b=?0;c`, true},
		{`x;a=1;a=2;b=3`, `x;a=2;b=3`, true}, // a repeated key keeps its place

		{`limit=5, remaining=0, reset=1`, "", false}, // a Dictionary, as drafts up to 06 sent
		{`"a",`, "", false},
		{`"a",,"b"`, "", false},
		{`"a" "b"`, "", false},
		{`"unterminated`, "", false},
		{`"bad \x escape"`, "", false},
		{"\"tab\tinside\"", "", false},
		{`1234567890123456`, "", false}, // 16 digits
		{`1234567890123.5`, "", false},  // 13 integer digits
		{`1.2345`, "", false},
		{`1.`, "", false},
		{`-`, "", false},
		{`@1.5`, "", false},
		{`@`, "", false},
		{`1, @`, "", false},
		{`?2`, "", false},
		{`:not base64!:`, "", false},
		{`:aGVsbG8`, "", false},
		{`%"%C3%BC"`, "", false}, // upper-case hex
		{`%"%ff"`, "", false},    // not UTF-8
		{`("a" "b"`, "", false},
		{`("a""b")`, "", false},
		{`a;B=1`, "", false}, // keys are lower case
		{`a;=1`, "", false},
		{`é`, "", false},
	} {
		m, err := parseSFList([]string{c.in})
		if (err == nil) != c.ok {
			t.Errorf("parseSFList(%q): err = %v, want ok %v", c.in, err, c.ok)
			continue
		}
		if err != nil {
			continue
		}
		if got := serializeSFList(m); got != c.want {
			t.Errorf("parseSFList(%q) serialises as %q, want %q", c.in, got, c.want)
		}
	}
}

// TestParseSFListLines checks that several field lines make one List.
func TestParseSFListLines(t *testing.T) {
	m, err := parseSFList([]string{`"a";r=1`, `"b";r=2`})
	if err != nil || serializeSFList(m) != `"a";r=1, "b";r=2` {
		t.Fatalf("got %v, %v", m, err)
	}
	if _, err := parseSFList([]string{`"a"`, ``}); err == nil {
		t.Fatal("an empty line after a member parsed: it is a trailing comma")
	}
}

// FuzzParseSFList holds the parser to RFC 9651's round trip: whatever parses serialises to a
// List that parses to the same members, and serialises to itself; nothing panics.
func FuzzParseSFList(f *testing.F) {
	for _, s := range []string{
		`"default";r=0;t=1`, `"default";q=5;w=5, "daily";q=1000;w=86400`, `("a" "b");lvl=5, ()`,
		`1.5, -0.25, ?1, @1659578233, :aGVsbG8=:, %"f%c3%bc"`, `limit=5, remaining=0`, `tok;a;b=?0`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		m, err := parseSFList(strings.Split(in, "\n"))
		if err != nil {
			return
		}
		out := serializeSFList(m)
		m2, err := parseSFList([]string{out})
		if err != nil {
			t.Fatalf("%q parsed, but its serialisation %q does not: %v", in, out, err)
		}
		if len(m) == 0 && len(m2) == 0 {
			return
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("%q: %#v, serialised as %q and parsed again: %#v", in, m, out, m2)
		}
		if again := serializeSFList(m2); again != out {
			t.Fatalf("%q serialises as %q, then as %q", in, out, again)
		}
	})
}
