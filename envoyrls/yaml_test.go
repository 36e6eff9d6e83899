package envoyrls

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// refused is a YAMLv2 case's want of a file refused.
const refused = "refused"

// dumpRules lists the rules of c, sorted, as the test's record of envoyproxy/ratelimit's loads.
func dumpRules(c *Config) string {
	var lines []string
	for _, r := range c.rules {
		lines = append(lines, fmt.Sprintf("%s rpu=%d unit=%s name=%q unlimited=%t shadow=%t replaces=%q",
			r.ID, r.RequestsPerUnit, r.Unit, r.Name, r.Unlimited, r.ShadowMode, r.Replaces))
	}
	slices.Sort(lines)
	return strings.Join(lines, " | ")
}

// TestYAMLv2: each file loads as envoyproxy/ratelimit (gopkg.in/yaml.v2 v2.4.0 and its
// validateYamlKeys) loads it, or is refused as it refuses it: merge keys, a key written twice
// (the last value kept, rate_limit's merged field by field), timestamps, binary and unknown
// tags read as strings, YAML 1.1's integers and booleans. Each want is what
// envoyproxy/ratelimit's config package, at the version the README names, loaded from the file.
func TestYAMLv2(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"alias_desc", "domain: d\ndescriptors: &l\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"alias_list", "x: &l [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n", refused},
		{"alias_value", "domain: d\ndescriptors:\n  - key: &k a\n    value: *k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"big_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", refused},
		{"big_value", "domain: d\ndescriptors:\n  - key: a\n    value: 99999999999999999999\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"bin_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0b11}\n", "d.a rpu=3 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"bin_value", "domain: d\ndescriptors:\n  - key: a\n    value: 0b101\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_0b101 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"binary_value", "domain: d\ndescriptors:\n  - key: a\n    value: !!binary aGVsbG8=\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_hello rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"bool_key", "domain: d\nyes: x\n", refused},
		{"bool_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: true}\n", refused},
		{"comment", "# only\n", refused},
		{"custom_tag_value", "domain: d\ndescriptors:\n  - key: a\n    value: !foo bar\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_bar rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"date", "domain: d\ndescriptors:\n  - key: a\n    value: 2022-11-28\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_2022-11-28 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"date_domain", "domain: 2022-11-28\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "2022-11-28.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"date_key", "domain: d\ndescriptors:\n  - key: 2022-11-28\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.2022-11-28 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"date_mapkey", "domain: d\ndescriptors:\n  - key: a\n    2022-11-28: x\n", refused},
		{"date_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2022-11-28}\n", refused},
		{"date_tagged", "domain: d\ndescriptors:\n  - key: a\n    value: !!timestamp 2022-11-28\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_2022-11-28 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"datetime", "domain: d\ndescriptors:\n  - key: a\n    value: 2022-11-28T10:00:00Z\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_2022-11-28T10:00:00Z rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"datetime2", "domain: d\ndescriptors:\n  - key: a\n    value: 2001-12-14 21:59:43.10\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_2001-12-14 21:59:43.10 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"desc_map", "domain: d\ndescriptors: {}\n", refused},
		{"desc_scalar", "domain: d\ndescriptors: x\n", refused},
		{"dup_desc", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 6}\n", "d.b rpu=6 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_domain", "domain: a\ndomain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_in_replace", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, name: n, replaces: [{name: x, name: y}]}\n", "d.a rpu=5 unit=SECOND name=\"n\" unlimited=false shadow=false replaces=[\"y\"]"},
		{"dup_replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, name: n, replaces: [{name: x}], replaces: [{name: y}]}\n", "d.a rpu=5 unit=SECOND name=\"n\" unlimited=false shadow=false replaces=[\"y\"]"},
		{"dup_rl", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    rate_limit: {name: n}\n", "d.a rpu=5 unit=SECOND name=\"n\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_null", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n    rate_limit: ~\n", ""},
		{"dup_then_merge", "domain: d\ndescriptors:\n  - key: z\n    <<: {key: a}\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_value_float", "domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_v rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_value_float2", "domain: d\ndescriptors:\n  - key: a\n    value: v\n    value: 1.5\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"empty", "", refused},
		{"float_value", "domain: d\ndescriptors:\n  - key: a\n    value: 1e3\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"hex_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0x10}\n", "d.a rpu=16 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"inf_value", "domain: d\ndescriptors:\n  - key: a\n    value: .inf\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"int_key", "domain: d\n1: x\n", refused},
		{"int_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: 1\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"int_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: 1, requests_per_unit: 1}\n", refused},
		{"int_value", "domain: d\ndescriptors:\n  - key: a\n    value: 0x1F\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_0x1F rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"key_bool", "domain: d\ndescriptors:\n  - key: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.true rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"key_int", "domain: d\ndescriptors:\n  - key: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.5 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge", "domain: d\ndescriptors:\n  - &base\n    key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - <<: *base\n    key: b\n", "d.a rpu=5 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[] | d.b rpu=5 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge_alias_scalar", "x: &s 5\ndomain: d\ndescriptors:\n  - key: a\n    <<: *s\n", refused},
		{"merge_badkey", "domain: d\ndescriptors:\n  - key: a\n    <<: {foo: 1}\n", refused},
		{"merge_before", "domain: d\ndescriptors:\n  - key: b\n    <<: {key: a, rate_limit: {unit: second, requests_per_unit: 5}}\n", "d.a rpu=5 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge_float_overridden", "domain: d\ndescriptors:\n  - <<: {key: a, value: 1.5}\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_v rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge_list", "domain: d\ndescriptors:\n  - <<: [{key: a, value: x}, {key: b, value: y, rate_limit: {unit: second, requests_per_unit: 5}}]\n", "d.a_x rpu=5 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge_list_alias", "a: &a {key: a}\nb: &b {key: b, value: v}\ndomain: d\ndescriptors:\n  - <<: [*a, *b]\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"merge_quoted", "domain: d\ndescriptors:\n  - key: a\n    \"<<\": {value: v}\n", refused},
		{"merge_rl", "rl: &rl {unit: minute, requests_per_unit: 3}\n", refused},
		{"merge_rl2", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      <<: {unit: minute, requests_per_unit: 3}\n      name: n\n", "d.a rpu=3 unit=MINUTE name=\"n\" unlimited=false shadow=false replaces=[]"},
		{"merge_rl_deep", "domain: d\ndescriptors:\n  - <<: {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}\n    rate_limit: {name: n}\n", "d.a rpu=3 unit=MINUTE name=\"n\" unlimited=false shadow=false replaces=[]"},
		{"merge_scalar", "domain: d\ndescriptors:\n  - key: a\n    <<: 5\n", refused},
		{"merge_tagged", "domain: d\ndescriptors:\n  - key: a\n    !!merge <<: {value: v, rate_limit: {unit: second, requests_per_unit: 1}}\n", "d.a_v rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge_top", "base: &b {domain: d}\n", refused},
		{"merge_top2", "<<: {domain: d}\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"merge_value", "domain: d\ndescriptors:\n  - key: a\n    value: <<\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_<< rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"multidoc", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\ndomain: e\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"nested_list", "domain: d\ndescriptors:\n  - key: a\n    descriptors: [[{key: b}]]\n", refused},
		{"null_doc", "~\n", refused},
		{"null_key", "domain: d\n~: x\n", refused},
		{"null_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: ~}\n", "d.a rpu=0 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"null_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: ~\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"null_value", "domain: d\ndescriptors:\n  - key: a\n    value: ~\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"o_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0o10}\n", "d.a rpu=8 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"o_value", "domain: d\ndescriptors:\n  - key: a\n    value: 0o17\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_0o17 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"octal_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 010}\n", "d.a rpu=8 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"octal_value", "domain: d\ndescriptors:\n  - key: a\n    value: 010\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_010 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"off_value", "domain: d\ndescriptors:\n  - key: a\n    value: Off\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_Off rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"on_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: on\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=true replaces=[]"},
		{"plus_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: +7}\n", "d.a rpu=7 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"plus_value", "domain: d\ndescriptors:\n  - key: a\n    value: +12\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_+12 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"replaces_map", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: {name: x}}\n", refused},
		{"replaces_scalar", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [x]}\n", refused},
		{"rl_list", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: [1]\n", refused},
		{"rl_scalar", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n", refused},
		{"sexa_value", "domain: d\ndescriptors:\n  - key: a\n    value: 12:30:00\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_12:30:00 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"str_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n", refused},
		{"str_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: \"true\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n", refused},
		{"str_tag_value", "domain: d\ndescriptors:\n  - key: a\n    value: !!str 1.5\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_1.5 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"tab_value", "domain: d\ndescriptors:\n  - key: a\n    value: \"a\\tb\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_a\tb rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"top_list", "- domain: d\n", refused},
		{"top_scalar", "d\n", refused},
		{"under_rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1_000}\n", "d.a rpu=1000 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"under_value", "domain: d\ndescriptors:\n  - key: a\n    value: 1_000\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_1_000 rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"y_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: y\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=true replaces=[]"},
		{"y_value", "domain: d\ndescriptors:\n  - key: a\n    value: y\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_y rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"yes_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a rpu=1 unit=SECOND name=\"\" unlimited=false shadow=true replaces=[]"},
		{"yes_value", "domain: d\ndescriptors:\n  - key: a\n    value: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "d.a_yes rpu=1 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_float_overridden", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n    rate_limit: {name: n}\n", "d.a rpu=1 unit=SECOND name=\"n\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_badkey_overridden", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {foo: 1}\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "d.a rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_scalar_first", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n    rate_limit: {unit: second, requests_per_unit: 2}\n", refused},
		{"dup_rl_list_last", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n    rate_limit: [1]\n", refused},
		{"merge_seq_alias", "x: &s [{key: a}]\ndomain: d\ndescriptors:\n  - <<: *s\n", refused},
		{"merge_list_rl_fields", "domain: d\ndescriptors:\n  - key: a\n    <<: [{rate_limit: {unit: second, requests_per_unit: 2}}, {rate_limit: {name: n}}]\n", "d.a rpu=2 unit=SECOND name=\"n\" unlimited=false shadow=false replaces=[]"},
		{"merge_list_rl_fields2", "domain: d\ndescriptors:\n  - key: a\n    <<: [{rate_limit: {name: n}}, {rate_limit: {unit: second, requests_per_unit: 2}}]\n", "d.a rpu=2 unit=SECOND name=\"n\" unlimited=false shadow=false replaces=[]"},
		{"merge_alias_rl_fields", "domain: d\ndescriptors:\n  - &a {key: a, rate_limit: {unit: minute, requests_per_unit: 3, name: x}}\n  - <<: *a\n    key: b\n    rate_limit: {name: y, replaces: [{name: x}]}\n", "d.a rpu=3 unit=MINUTE name=\"x\" unlimited=false shadow=false replaces=[] | d.b rpu=3 unit=MINUTE name=\"y\" unlimited=false shadow=false replaces=[\"x\"]"},
		{"merge_nested", "domain: d\ndescriptors:\n  - key: a\n    <<: {<<: {value: v}, key: b}\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "d.b_v rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_descriptors", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n    descriptors: [{key: b, rate_limit: {unit: second, requests_per_unit: 3}}]\n    descriptors: [{key: c, rate_limit: {unit: second, requests_per_unit: 4}}]\n", "d.a rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[] | d.a.c rpu=4 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_merge_inside", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n    rate_limit: {<<: {name: m}, unlimited: false}\n", "d.a rpu=2 unit=SECOND name=\"m\" unlimited=false shadow=false replaces=[]"},
		{"merge_rl_after", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2, <<: {unit: minute}}\n", "d.a rpu=2 unit=MINUTE name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_null_then_map", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n    rate_limit: ~\n    rate_limit: {name: n, unlimited: true}\n", "d.a rpu=0 unit=UNKNOWN name=\"n\" unlimited=true shadow=false replaces=[]"},
		{"merge_null", "domain: d\ndescriptors:\n  - key: a\n    <<: ~\n", refused},
		{"merge_list_scalar", "domain: d\ndescriptors:\n  - key: a\n    <<: [{value: v}, 5]\n", refused},
		{"dup_value_three", "domain: d\ndescriptors:\n  - key: a\n    value: x\n    value: 1.5\n    value: y\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "d.a_y rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_domain_float_last", "domain: d\ndomain: 1.5\n", refused},
		{"dup_domain_float_first", "domain: 1.5\ndomain: d\n", ""},
		{"dup_shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n    shadow_mode: false\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "d.a rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_descriptor_key", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3}\n", refused},
		{"binary_key", "domain: d\ndescriptors:\n  - key: a\n    !!binary a2V5: x\n", ""},
		{"binary_key_key", "domain: d\ndescriptors:\n  - !!binary a2V5: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "d.a rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dup_rl_replaces_kept", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2, replaces: [{name: x}]}\n    rate_limit: {name: y}\n", "d.a rpu=2 unit=SECOND name=\"y\" unlimited=false shadow=false replaces=[\"x\"]"},
		{"merge_top_overridden", "domain: d\n<<: {descriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 2}}]}\ndescriptors: ~\n", ""},
		{"merge_in_replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2, replaces: [{name: x, <<: {name: y}}]}\n", "d.a rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[\"y\"]"},
		{"alias_rl_top", "a: &a {unit: hour, requests_per_unit: 9}\ndomain: d\ndescriptors:\n  - key: a\n    rate_limit: *a\n", refused},
		{"alias_rl_fields", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: hour, requests_per_unit: 9}\n  - key: b\n    rate_limit: *r\n    rate_limit: {name: z}\n", "d.a rpu=9 unit=HOUR name=\"\" unlimited=false shadow=false replaces=[] | d.b rpu=9 unit=HOUR name=\"z\" unlimited=false shadow=false replaces=[]"},
		{"dup_tagged_values", "domain: d\ndescriptors:\n  - key: a\n    value: !!timestamp 2022-11-28\n    value: !!binary aGk=\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "d.a_hi rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
		{"dates_nested", "domain: d\ndescriptors:\n  - key: a\n    value: 2022-11-28\n    descriptors:\n      - key: b\n        value: 2022-11-29 10:00:00\n        rate_limit: {unit: second, requests_per_unit: 2}\n", "d.a_2022-11-28.b_2022-11-29 10:00:00 rpu=2 unit=SECOND name=\"\" unlimited=false shadow=false replaces=[]"},
	} {
		c, err := Parse(File{Name: "f.yaml", Data: []byte(tc.yaml)})
		switch {
		case tc.want == refused && err == nil:
			t.Errorf("%s: loaded %s; envoyproxy/ratelimit refuses it", tc.name, dumpRules(c))
		case tc.want != refused && err != nil:
			t.Errorf("%s: refused: %v; envoyproxy/ratelimit loads %s", tc.name, err, tc.want)
		case err == nil && dumpRules(c) != tc.want:
			t.Errorf("%s: loaded\n\t%s\nwant\n\t%s", tc.name, dumpRules(c), tc.want)
		}
	}
}

// TestYAMLAliases: aliases that expand beyond any configuration are refused, promptly, as
// yaml.v2 refuses excessive aliasing.
func TestYAMLAliases(t *testing.T) {
	yml := "domain: d\nl0: &l0 [x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 10; i++ {
		yml += fmt.Sprintf("l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	start := time.Now()
	_, err := Parse(File{Name: "f.yaml", Data: []byte(yml)})
	if err == nil || !strings.Contains(err.Error(), "expand to more than") {
		t.Errorf("got %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestYAMLAliasCycles: an anchor whose value holds an alias to itself, as a descriptor or as a
// merge, is refused at once, as yaml.v2 refuses it; it was expanded until 2^20 nodes (a
// 60-byte file took a second and 250 MB).
func TestYAMLAliasCycles(t *testing.T) {
	for _, yml := range []string{
		"domain: d\ndescriptors:\n  - &a {key: k, descriptors: [*a]}\n",
		"domain: d\ndescriptors:\n  - &a {key: k, rate_limit: {unit: second, requests_per_unit: 1}, x: {<<: *a}}\n",
		"domain: d\nx: &a [*a]\n",
	} {
		_, err := Parse(File{Name: "f.yaml", Data: []byte(yml)})
		if err == nil || !strings.Contains(err.Error(), "contains itself") {
			t.Errorf("%q: %v, want refused as an anchor that contains itself", yml, err)
		}
	}
}
