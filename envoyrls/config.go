package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"

	"github.com/retryafter/retryafter"
)

// A Config is the rate limit rules of envoyproxy/ratelimit's YAML files, one domain a file,
// ready to match a request's descriptors. It is read-only once made, and safe for concurrent
// use.
type Config struct {
	domains map[string]*level
	rules   map[string]*Rule // by identity (Rule.key): two rules may share an ID, never that
	ids     map[string]*Rule // by ID, the first loaded of those that share one
}

// A Rule is one rate_limit of a Config: requests_per_unit a unit, read as a token bucket of
// rate RequestsPerUnit/Unit and burst RequestsPerUnit.
type Rule struct {
	// ID is envoyproxy/ratelimit's full key of the rule: the domain and the path of
	// descriptor keys (and values) to it, "domain.key_value.key". It names the rule in the
	// metrics. Two rules may share it, as dots are allowed in domains, keys and values
	// ("d.x.y" is both key "x.y" and key "y" under "x"): each is decided by its own limit,
	// as envoyproxy/ratelimit decides them.
	ID string

	// Name is the rule's name, for replaces.
	Name string

	// RequestsPerUnit and Unit are the limit; Per is the length of Unit (a month is 30
	// days, a year 365, as envoyproxy/ratelimit counts them).
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	Per             time.Duration

	// Unlimited rules admit everything; ShadowMode rules are decided and reported but never
	// refuse.
	Unlimited  bool
	ShadowMode bool

	// Replaces lists the names of the rules this one replaces when both match a request.
	Replaces []string

	// File and Line say where the rule is written.
	File string
	Line int

	// key is the rule's identity: the domain and the path to the rule, each field
	// length-prefixed, so that no two rules share it. It names the rule's clients in the
	// limiter.
	key string
}

// Policy returns the token bucket r is read as: RequestsPerUnit a Per, with a burst of
// RequestsPerUnit, named by its name or else its ID.
func (r *Rule) Policy() retryafter.Policy {
	name := r.Name
	if name == "" {
		name = r.ID
	}
	return retryafter.Policy{
		Name:  name,
		Limit: rate.Limit(float64(r.RequestsPerUnit) / r.Per.Seconds()),
		Burst: int(r.RequestsPerUnit),
	}
}

// A level is one level of a domain's descriptor tree.
type level struct {
	children  map[string]*level // by "key_value", or "key" for a key without a value
	wildcards []wildcard        // in the order written
	rule      *Rule             // nil: no rate_limit at this level
	share     bool              // share_threshold: every value the wildcard matches is one client
	pattern   string            // the value written, for share_threshold
}

// A wildcard is a "key_value" with a "*" in the value, split at its stars.
type wildcard struct {
	key   string
	parts []string
}

// The length of each unit, as envoyproxy/ratelimit's utils.UnitToDivider counts it.
var unitLength = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// A File is one configuration file: its name, for errors, and its YAML.
type File struct {
	Name string
	Data []byte
}

// Load reads the configuration at path: a file, or every file under a directory, as
// envoyproxy/ratelimit's runtime loader reads its RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY with RUNTIME_IGNOREDOTFILES unset (see Loader).
func Load(path string) (*Config, error) { return Loader{}.Load(path) }

// A Loader reads a configuration from files as envoyproxy/ratelimit's runtime loader
// (github.com/lyft/goruntime) does: every file under a directory, in its subdirectories too,
// whatever its name, and a symbolic link to a file as the file. Where that loader skips a file
// with a warning (a symbolic link to a directory, which it does not follow; a file it cannot
// read), Load refuses the configuration, naming the file, rather than load it without that
// file; it refuses too a file that is not a regular one (a pipe, a device), which that loader
// would read until it ends. path itself may be a symbolic link to a directory.
type Loader struct {
	// IgnoreDotFiles skips the files and directories under path whose names begin with a dot,
	// as envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES=true: the ..data link and the
	// ..2006_01_02 directory of a Kubernetes ConfigMap volume, an editor's swap files.
	IgnoreDotFiles bool
}

// Load reads the configuration at path, a file or a directory.
func (l Loader) Load(path string) (*Config, error) {
	files, err := l.read(path)
	if err != nil {
		return nil, err
	}
	return Parse(files...)
}

// read returns the file at path, or the files under the directory at path.
func (l Loader) read(path string) ([]File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		f, err := readFile(path)
		return []File{f}, err
	}
	root := path + string(filepath.Separator) // walked when it is a symbolic link too
	var files []File
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case l.IgnoreDotFiles && p != root && strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return nil
		}
		f, err := readFile(p)
		files = append(files, f)
		return err
	})
	return files, err
}

// readFile reads the regular file at path, following a symbolic link.
func readFile(path string) (File, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return File{}, err
	case fi.IsDir():
		return File{}, &ConfigError{File: path, Msg: "a symbolic link to a directory, which envoyproxy/ratelimit skips: remove it, or give it a name beginning with a dot and skip dot files (RUNTIME_IGNOREDOTFILES)"}
	case !fi.Mode().IsRegular():
		return File{}, &ConfigError{File: path, Msg: "not a regular file"}
	}
	data, err := os.ReadFile(path)
	return File{Name: path, Data: data}, err
}

// Parse reads files, one domain each. It refuses, with the file, the line and why, every
// configuration envoyproxy/ratelimit refuses, and quota_mode (see the package doc).
func Parse(files ...File) (*Config, error) {
	c := &Config{domains: map[string]*level{}, rules: map[string]*Rule{}, ids: map[string]*Rule{}}
	var errs []error
	for _, f := range files {
		if err := c.parse(f); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// A ConfigError is a configuration refused: where, and why.
type ConfigError struct {
	File string
	Line int // 0 when the error is of the whole file
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// The YAML of one file, as envoyproxy/ratelimit's YamlRoot.
type yamlRoot struct {
	Domain      string
	Descriptors []yamlDescriptor
}

type yamlDescriptor struct {
	Key            string
	Value          string
	RateLimit      *yamlRateLimit `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor
	ShadowMode     bool `yaml:"shadow_mode"`
	QuotaMode      bool `yaml:"quota_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
	Metadata       map[string]any
	line           int
}

// UnmarshalYAML decodes a descriptor and keeps its line.
func (d *yamlDescriptor) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlDescriptor
	if err := n.Decode((*plain)(d)); err != nil {
		return err
	}
	d.line = n.Line
	return nil
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string
	Unlimited       bool
	Name            string
	Replaces        []struct{ Name string }
}

// validKeys are the keys envoyproxy/ratelimit accepts, at any depth.
var validKeys = []string{
	"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric",
	"value_to_metric", "share_threshold", "metadata",
}

// parse adds the domain of f to c.
func (c *Config) parse(f File) error {
	fail := func(line int, format string, args ...any) error {
		return &ConfigError{File: f.Name, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return fail(0, "error loading config file: %v", err)
	}
	var root yamlRoot
	if doc.Kind != 0 {
		top := doc.Content[0]
		if top.Kind != yaml.MappingNode && !(top.Kind == yaml.ScalarNode && top.Tag == "!!null") {
			return fail(top.Line, "error loading config file: the file is not a mapping")
		}
		if err := decode(top, &root, fail); err != nil {
			return err
		}
	}
	if root.Domain == "" {
		return fail(0, "config file cannot have empty domain")
	}
	if _, ok := c.domains[root.Domain]; ok {
		return fail(0, "duplicate domain '%s' in config file", root.Domain)
	}
	d := &level{children: map[string]*level{}}
	if err := c.load(d, f.Name, root.Domain+".", appendField(nil, root.Domain), root.Descriptors, fail); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	return nil
}

// decode validates top and decodes it into root, as envoyproxy/ratelimit's
// ConfigFileContentToYaml reads a file with yaml.v2 (see flattener).
func decode(top *yaml.Node, root *yamlRoot, fail func(int, string, ...any) error) error {
	plain, err := flatten(top, false, fail)
	if err != nil {
		return err
	}
	if err := validateKeys(plain, fail); err != nil {
		return err
	}
	fields, err := flatten(top, true, fail)
	if err != nil {
		return err
	}
	if err := fields.Decode(root); err != nil {
		return fail(0, "error loading config file: %v", err)
	}
	return nil
}

// validateKeys refuses what envoyproxy/ratelimit's validateYamlKeys refuses: a key that is not
// a string or not one of validKeys, a list of anything but mappings, a value that is not a
// string, an integer, a boolean or null. Metadata is not checked.
func validateKeys(m *yaml.Node, fail func(int, string, ...any) error) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], deref(m.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return fail(k.Line, "config error, key is not of type string: %v", k.Value)
		}
		if !slices.Contains(validKeys, k.Value) {
			return fail(k.Line, "config error, unknown key '%s'", k.Value)
		}
		if k.Value == "metadata" {
			continue
		}
		if err := validateValue(v, fail); err != nil {
			return err
		}
	}
	return nil
}

// validateValue checks one value of a mapping, as validateKeys.
func validateValue(v *yaml.Node, fail func(int, string, ...any) error) error {
	switch v.Kind {
	case yaml.SequenceNode:
		for _, e := range v.Content {
			e = deref(e)
			if e.Kind != yaml.MappingNode {
				return fail(e.Line, "config error, yaml file contains list of type other than map: %v", e.Value)
			}
			if err := validateKeys(e, fail); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		return validateKeys(v, fail)
	case yaml.ScalarNode:
		switch v.ShortTag() {
		case "!!str", "!!int", "!!bool", "!!null":
		default:
			return fail(v.Line, "error checking config: %s is not a string, an integer or a boolean", v.Value)
		}
	}
	return nil
}

// deref returns the node an alias stands for.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// load adds descriptors to l, as envoyproxy/ratelimit's loadDescriptors: parent is the ID of
// l, followed by a dot, and path its key (see Rule.key).
func (c *Config) load(l *level, file, parent string, path []byte, descriptors []yamlDescriptor, fail func(int, string, ...any) error) error {
	for _, y := range descriptors {
		if y.Key == "" {
			return fail(y.line, "descriptor has empty key")
		}
		final := y.Key
		if y.Value != "" {
			final += "_" + y.Value
		}
		id := parent + final
		if _, ok := l.children[final]; ok {
			return fail(y.line, "duplicate descriptor composite key '%s'", id)
		}
		if y.QuotaMode {
			return fail(y.line, "quota_mode is not supported: a request refused only when all its quota descriptors are over their limits is not decided all or nothing")
		}
		if y.ShareThreshold && !strings.Contains(final, "*") {
			return fail(y.line, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", final)
		}
		n := &level{children: map[string]*level{}, share: y.ShareThreshold, pattern: y.Value}
		key := appendField(slices.Clip(path), final)
		if y.RateLimit != nil {
			r, err := rule(y, id, file, fail)
			if err != nil {
				return err
			}
			r.key = string(key)
			n.rule = r
			c.rules[r.key] = r
			if c.ids[id] == nil {
				c.ids[id] = r
			}
		}
		if strings.Contains(final, "*") {
			l.wildcards = append(l.wildcards, wildcard{key: final, parts: strings.Split(final, "*")})
		}
		if err := c.load(n, file, id+".", key, y.Descriptors, fail); err != nil {
			return err
		}
		l.children[final] = n
	}
	return nil
}

// rule reads the rate_limit of y, whose full key is id.
func rule(y yamlDescriptor, id, file string, fail func(int, string, ...any) error) (*Rule, error) {
	rl := y.RateLimit
	unit, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(rl.Unit)]
	valid := ok && unit != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case rl.Unlimited && valid:
		return nil, fail(y.line, "should not specify rate limit unit when unlimited")
	case !rl.Unlimited && !valid:
		return nil, fail(y.line, "invalid rate limit unit '%s'", rl.Unit)
	}
	r := &Rule{
		ID: id, Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit,
		Unit: rlsv3.RateLimitResponse_RateLimit_Unit(unit), Per: unitLength[rlsv3.RateLimitResponse_RateLimit_Unit(unit)],
		Unlimited: rl.Unlimited, ShadowMode: y.ShadowMode, File: file, Line: y.line,
	}
	if uint64(rl.RequestsPerUnit) > math.MaxInt {
		return nil, fail(y.line, "requests_per_unit %d is more than this platform's int holds", rl.RequestsPerUnit)
	}
	for _, rep := range rl.Replaces {
		if rep.Name == "" {
			return nil, fail(y.line, "should not have an empty replaces entry")
		}
		if rep.Name == rl.Name {
			return nil, fail(y.line, "replaces should not contain name of same descriptor")
		}
		r.Replaces = append(r.Replaces, rep.Name)
	}
	return r, nil
}
