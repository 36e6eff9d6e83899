package envoyrls

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// upstream is where envoyproxy/ratelimit's own files are (see its ORIGIN.md).
const upstream = "testdata/envoyproxy-ratelimit"

// TestUpstreamConfigs loads every configuration file of envoyproxy/ratelimit's tests, examples
// and integration tests: each loads, or is refused with the reason its own tests expect (or,
// for quota_mode, ours), the file and, where it has one, the line.
func TestUpstreamConfigs(t *testing.T) {
	refused := map[string]string{
		"test/config/bad_limit_unit.yaml":      "bad_limit_unit.yaml:3: invalid rate limit unit 'foo'",
		"test/config/bad_yaml.yaml":            "bad_yaml.yaml: error loading config file: yaml: line 2: found unexpected end of stream",
		"test/config/empty_domain.yaml":        "empty_domain.yaml: config file cannot have empty domain",
		"test/config/empty_key.yaml":           "empty_key.yaml:3: descriptor has empty key",
		"test/config/duplicate_key.yaml":       "duplicate_key.yaml:6: duplicate descriptor composite key 'test-domain.key1_value1'",
		"test/config/misspelled_key.yaml":      "misspelled_key.yaml:5: config error, unknown key 'ratelimit'",
		"test/config/misspelled_key2.yaml":     "misspelled_key2.yaml:7: config error, unknown key 'requestsperunit'",
		"test/config/non_string_key.yaml":      "non_string_key.yaml:1: config error, key is not of type string: 0.25",
		"test/config/non_map_list.yaml":        "non_map_list.yaml:3: config error, yaml file contains list of type other than map: a",
		"test/config/replaces_empty.yaml":      "replaces_empty.yaml:6: should not have an empty replaces entry",
		"test/config/replaces_self.yaml":       "replaces_self.yaml:6: replaces should not contain name of same descriptor",
		"test/config/unlimited_with_unit.yaml": "unlimited_with_unit.yaml:3: should not specify rate limit unit when unlimited",
		"examples/example.yaml":                "example.yaml:87: quota_mode is not supported",
	}
	files, err := filepath.Glob(filepath.Join(upstream, "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(upstream, "test", "config", "*.yaml"))
	files = append(files, more...)
	if len(files) < 25 {
		t.Fatalf("found %d files of envoyproxy/ratelimit, want its 26", len(files))
	}
	seen := 0
	for _, f := range files {
		name, _ := filepath.Rel(upstream, f)
		t.Run(name, func(t *testing.T) {
			_, err := Load(f)
			want, ok := refused[filepath.ToSlash(name)]
			switch {
			case !ok && err != nil:
				t.Errorf("refused: %v", err)
			case ok && err == nil:
				t.Errorf("loaded; want refused with %q", want)
			case ok:
				seen++
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refused with %q; want %q", err, want)
				}
			}
		})
	}
	if seen != len(refused) {
		t.Errorf("%d of the %d files to refuse were found", seen, len(refused))
	}
}

// TestDuplicateDomain: two files of one domain are refused, as envoyproxy/ratelimit does
// unless told to merge them.
func TestDuplicateDomain(t *testing.T) {
	dir := filepath.Join(upstream, "test", "config")
	var files []File
	for _, n := range []string{"basic_config.yaml", "duplicate_domain.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Name: n, Data: data})
	}
	_, err := Parse(files...)
	if err == nil || !strings.Contains(err.Error(), "duplicate_domain.yaml: duplicate domain 'test-domain' in config file") {
		t.Fatalf("got %v", err)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("%v is not a *ConfigError", err)
	}
}

// TestRefusedOnLoad covers what envoyproxy/ratelimit refuses beyond its test files.
func TestRefusedOnLoad(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1.5}\n", "f.yaml:4: error checking config"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: -1}\n", "cannot unmarshal"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "f.yaml:3: invalid rate limit unit ''"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "f.yaml:3: share_threshold can only be used with wildcard values"},
		{"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n", "f.yaml:3: quota_mode is not supported"},
		{"- domain: d\n", "f.yaml:1: error loading config file"},
		{"domain: d\nfoo: 1\n", "f.yaml:2: config error, unknown key 'foo'"},
		{"", "f.yaml: config file cannot have empty domain"},
	} {
		_, err := Parse(File{Name: "f.yaml", Data: []byte(tc.yaml)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// descriptor makes a descriptor of key, value pairs.
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestMatch checks the matching of envoyproxy/ratelimit's config_test.go on its own files: the
// rule found (by ID, "" for none), and that the key names that rule.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		file, domain string
		kv           []string
		rule         string
	}{
		{"basic_config.yaml", "test-domain", []string{"key1", "value1"}, ""},
		{"basic_config.yaml", "test-domain", []string{"key1", "value1", "subkey1", "x"}, "test-domain.key1_value1.subkey1"},
		{"basic_config.yaml", "test-domain", []string{"key1", "value1", "subkey1", "subvalue1"}, "test-domain.key1_value1.subkey1_subvalue1"},
		{"basic_config.yaml", "test-domain", []string{"key1", "value1", "subkey1", "x", "extra", "y"}, ""},
		{"basic_config.yaml", "test-domain", []string{"key2", "x"}, "test-domain.key2"},
		{"basic_config.yaml", "test-domain", []string{"key2", "value2"}, "test-domain.key2_value2"},
		{"basic_config.yaml", "test-domain", []string{"key2", "value3"}, ""},
		{"basic_config.yaml", "other-domain", []string{"key2", "x"}, ""},
		{"wildcard.yaml", "test-domain", []string{"wild", "foo1"}, "test-domain.wild_foo*"},
		{"wildcard.yaml", "test-domain", []string{"wild", "bar"}, ""},
		{"wildcard.yaml", "test-domain", []string{"noWild", "foo1"}, ""},
		{"wildcard.yaml", "test-domain", []string{"noVal", "foo1"}, "test-domain.noVal"},
		{"wildcard.yaml", "test-domain", []string{"nestedWild", "val1", "wild", "goo2"}, "test-domain.nestedWild_val1.wild_goo*"},
		{"wildcard.yaml", "test-domain", []string{"midWild", "barab"}, "test-domain.midWild_bar*b"},
		{"wildcard.yaml", "test-domain", []string{"midWild", "barb"}, "test-domain.midWild_bar*b"},
		{"wildcard.yaml", "test-domain", []string{"midWild", "bara"}, ""},
		{"wildcard.yaml", "test-domain", []string{"midWild", "xbarb"}, ""},
		{"wildcard.yaml", "test-domain", []string{"multiWild", "foo123bar456baz"}, "test-domain.multiWild_foo*bar*baz"},
		{"wildcard.yaml", "test-domain", []string{"multiWild", "foobarbaz"}, "test-domain.multiWild_foo*bar*baz"},
	} {
		c, err := Load(filepath.Join(upstream, "test", "config", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		r, key := c.Match(tc.domain, descriptor(tc.kv...))
		id := ""
		if r != nil {
			id = r.ID
			if got, ok := ruleID(key); !ok || c.ruleOf(got) != r || c.Rule(r.ID) == nil {
				t.Errorf("%v: key %q names rule %q, want %q", tc.kv, key, got, r.key)
			}
		}
		if id != tc.rule {
			t.Errorf("%s %v: rule %q, want %q", tc.file, tc.kv, id, tc.rule)
		}
	}
}

// TestShareThreshold: the values a share_threshold wildcard matches are one client; those of a
// wildcard without it, or of a key without a value, one client each.
func TestShareThreshold(t *testing.T) {
	c, err := Load(filepath.Join(upstream, "integration", "share_threshold.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key := func(k, v string) string {
		r, key := c.Match("share-threshold-test", descriptor(k, v))
		if r == nil {
			t.Fatalf("%s=%s matched no rule", k, v)
		}
		return key
	}
	if a, b := key("files", "files/a.pdf"), key("files", "files/b.csv"); a != b {
		t.Errorf("share_threshold: %q and %q are two clients", a, b)
	}
	if a, b := key("files_no_share", "files_no_share/a.pdf"), key("files_no_share", "files_no_share/b.csv"); a == b {
		t.Errorf("no share_threshold: both values are the one client %q", a)
	}
}

// TestKeysDistinct: no two descriptors make one key unless they are one client, whatever bytes
// their keys and values hold.
func TestKeysDistinct(t *testing.T) {
	c, err := Parse(File{Name: "f.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n")})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for _, kv := range [][]string{
		{"a", "x"}, {"a", "x:1"}, {"a", "1:x"}, {"a", ""}, {"a", "x", "b", "y"}, {"a", "x", "b", "1:y"},
		{"a", "x1:b1:y", "b", ""}, {"a", "x", "b", ""}, {"a", "1:b"}, {"a", "x2:b"}, {"a", "xb", "b", ""}, {"a", "x", "b", "b"},
	} {
		_, key := c.Match("d", descriptor(kv...))
		if key == "" {
			t.Fatalf("%v matched no rule", kv)
		}
		if prev, ok := seen[key]; ok {
			t.Errorf("%v and %v make the one key %q", prev, kv, key)
		}
		seen[key] = kv
	}
}

// TestRuleIDsDistinct: two rules whose IDs are the one dotted name (a key holding a dot and a
// nested key; a domain holding a dot and a key) are each decided by their own limit, as
// envoyproxy/ratelimit decides them; only their name is shared.
func TestRuleIDsDistinct(t *testing.T) {
	c := &clock{now: t0}
	const nested = "domain: d\ndescriptors:\n  - key: x.y\n    rate_limit: {unit: second, requests_per_unit: 100}\n  - key: x\n    descriptors:\n      - key: y\n        rate_limit: {unit: hour, requests_per_unit: 1}\n"
	_, cl := newService(t, nested, c)
	for i := range 5 {
		if resp := ask(t, cl, request("d", 0, descriptor("x.y", "client"))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("x.y: request %d of 100 a second refused", i+1)
		}
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, cl, request("d", 0, descriptor("x", "client", "y", "client"))).GetOverallCode(); got != want {
			t.Errorf("x, y: request %d of 1 an hour: %v, want %v", i+1, got, want)
		}
	}

	cfg, err := Parse(File{Name: "a.yaml", Data: []byte("domain: a\ndescriptors:\n  - key: b.c\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")},
		File{Name: "ab.yaml", Data: []byte("domain: a.b\ndescriptors:\n  - key: c\n    rate_limit: {unlimited: true}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Rule("a.b.c"); r == nil || r.File != "a.yaml" {
		t.Errorf("Rule(%q) = %+v, want the first loaded of the two, a.yaml's", "a.b.c", r)
	}
	cl = serve(t, New(cfg, Memory, WithClock(c.Now)))
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, cl, request("a", 0, descriptor("b.c", "client"))).GetOverallCode(); got != want {
			t.Errorf("domain a, b.c: request %d of 1 an hour: %v, want %v", i+1, got, want)
		}
	}
	for i := range 3 {
		if got := ask(t, cl, request("a.b", 0, descriptor("c", "client"))).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
			t.Errorf("domain a.b, c: unlimited request %d: %v", i+1, got)
		}
	}
}

// writeDomain writes a configuration of domain to path, making its directories.
func writeDomain(t *testing.T, path, domain string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	yml := "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// domains returns the domains of c, sorted.
func domains(c *Config) []string {
	var ds []string
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// TestLoadDirectory: a directory is read as envoyproxy/ratelimit's runtime loader reads it:
// every file under it, in its subdirectories too, whatever its name, dot files included unless
// told to skip them; a symbolic link to a file is read, and one to a directory, which
// envoyproxy/ratelimit skips, is refused rather than left out.
func TestLoadDirectory(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	writeDomain(t, filepath.Join(dir, "a.yaml"), "a")
	writeDomain(t, filepath.Join(dir, "sub", "b.conf"), "b")
	writeDomain(t, filepath.Join(dir, "sub", "deeper", "c"), "c")
	writeDomain(t, filepath.Join(dir, ".d.yaml"), "d")
	writeDomain(t, filepath.Join(dir, ".hidden", "e.yaml"), "e")
	writeDomain(t, filepath.Join(outside, "f.yaml"), "f")
	if err := os.Symlink(filepath.Join(outside, "f.yaml"), filepath.Join(dir, "f.yaml")); err != nil {
		t.Skip(err)
	}
	load := func(l Loader, path string) []string {
		t.Helper()
		c, err := l.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return domains(c)
	}
	if got, want := load(Loader{}, dir), []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(got, want) {
		t.Errorf("Load: domains %v, want %v", got, want)
	}
	if got, want := load(Loader{IgnoreDotFiles: true}, dir), []string{"a", "b", "c", "f"}; !slices.Equal(got, want) {
		t.Errorf("IgnoreDotFiles: domains %v, want %v", got, want)
	}
	link := filepath.Join(outside, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if got, want := load(Loader{IgnoreDotFiles: true}, link), []string{"a", "b", "c", "f"}; !slices.Equal(got, want) {
		t.Errorf("through a link: domains %v, want %v", got, want)
	}

	// A link to a directory, as Kubernetes mounts ..data beside a ConfigMap's files.
	other := filepath.Join(outside, "other")
	writeDomain(t, filepath.Join(other, "g.yaml"), "g")
	if err := os.Symlink(other, filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "g")+": a symbolic link to a directory") {
		t.Errorf("a link to a directory: got %v", err)
	}
	if err := os.Rename(filepath.Join(dir, "g"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if got, want := load(Loader{IgnoreDotFiles: true}, dir), []string{"a", "b", "c", "f"}; !slices.Equal(got, want) {
		t.Errorf("IgnoreDotFiles, ..data: domains %v, want %v", got, want)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "..data: a symbolic link to a directory") {
		t.Errorf("..data read: got %v", err)
	}
}
