package envoyrls

import (
	"go.yaml.in/yaml/v3"
)

// envoyproxy/ratelimit reads its files with gopkg.in/yaml.v2, twice: into a generic map, whose
// keys and values validateKeys checks, and into its structs. A flattener rewrites a yaml.v3
// tree into what yaml.v2 reads from it, so that yaml.v3 decodes what yaml.v2 decodes:
//
//   - aliases are expanded;
//   - a merge key ("<<") is replaced by the pairs of the mapping it merges (of each mapping of
//     a sequence, the last first), where it is written: a pair later in the mapping overrides
//     them, and they override a pair before it;
//   - of a key written twice, the last value is kept; but, read into the structs, rate_limit
//     values are decoded into one struct, field by field (a null one starting afresh), as
//     yaml.v2 decodes a mapping into the struct a pointer already holds;
//   - the scalars yaml.v2 reads as strings are tagged !!str: timestamps (as written), binary
//     (decoded), a plain "<<" value, and unknown tags;
//   - a scalar whose explicit tag does not fit its value ("!!int x") is refused.
type flattener struct {
	fields bool                // the structs' reading: rate_limit values merged
	nodes  int                 // the nodes made so far, to bound what aliases expand to
	open   map[*yaml.Node]bool // the mappings and sequences being read, to refuse a cycle
	fail   func(int, string, ...any) error
}

// maxNodes bounds the nodes a file expands to through its aliases, as yaml.v2 and yaml.v3 bound
// their own expansion: far more than any configuration holds.
const maxNodes = 1 << 20

// flatten returns what yaml.v2 reads from n; with fields, as its structs read it.
func flatten(n *yaml.Node, fields bool, fail func(int, string, ...any) error) (*yaml.Node, error) {
	f := &flattener{fields: fields, open: map[*yaml.Node]bool{}, fail: fail}
	return f.node(n)
}

// count counts one more node made, and fails beyond maxNodes.
func (f *flattener) count(line int) error {
	f.nodes++
	if f.nodes > maxNodes {
		return f.fail(line, "error loading config file: the aliases expand to more than %d nodes", maxNodes)
	}
	return nil
}

// node returns what yaml.v2 reads from n.
func (f *flattener) node(n *yaml.Node) (*yaml.Node, error) {
	n = deref(n)
	if err := f.count(n.Line); err != nil {
		return nil, err
	}
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if err := f.enter(n); err != nil {
			return nil, err
		}
		defer delete(f.open, n)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return f.scalar(n)
	case yaml.MappingNode:
		return f.mapping(n)
	case yaml.SequenceNode:
		c := *n
		c.Tag, c.Anchor, c.Content = "!!seq", "", make([]*yaml.Node, len(n.Content))
		for i, e := range n.Content {
			var err error
			if c.Content[i], err = f.node(e); err != nil {
				return nil, err
			}
		}
		return &c, nil
	}
	return n, nil
}

// scalar returns what yaml.v2 reads from the scalar n.
func (f *flattener) scalar(n *yaml.Node) (*yaml.Node, error) {
	c := *n
	c.Anchor = ""
	switch n.ShortTag() {
	case "!!str", "!!int", "!!bool", "!!null", "!!float":
		if n.Style&yaml.TaggedStyle == 0 {
			return &c, nil // resolved from its value, which fits
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, f.fail(n.Line, "error loading config file: %v", err)
		}
		return &c, nil
	}
	// A timestamp, binary, a "<<" that is not a key, or a tag yaml.v2 does not know: a string.
	var s string
	if err := n.Decode(&s); err != nil {
		return nil, f.fail(n.Line, "error loading config file: %v", err)
	}
	c.Tag, c.Value, c.Style = "!!str", s, n.Style&^yaml.TaggedStyle
	return &c, nil
}

// mapping returns what yaml.v2 reads from the mapping m: its pairs, merges replaced, each key
// once.
func (f *flattener) mapping(m *yaml.Node) (*yaml.Node, error) {
	var pairs []*yaml.Node
	if err := f.pairs(m, &pairs); err != nil {
		return nil, err
	}
	c := *m
	c.Tag, c.Anchor, c.Content = "!!map", "", nil
	at := map[string]int{} // the index of each string key's value in c.Content
	for i := 0; i < len(pairs); i += 2 {
		k, err := f.node(pairs[i])
		if err != nil {
			return nil, err
		}
		v, err := f.node(pairs[i+1])
		if err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			c.Content = append(c.Content, k, v) // refused by validateKeys
			continue
		}
		j, ok := at[k.Value]
		if !ok {
			at[k.Value] = len(c.Content) + 1
			c.Content = append(c.Content, k, v)
			continue
		}
		if f.fields && k.Value == "rate_limit" {
			v = mergeFields(c.Content[j], v)
		}
		c.Content[j-1], c.Content[j] = k, v
	}
	return &c, nil
}

// pairs appends the keys and values of the mapping m to pairs, in the order yaml.v2 reads
// them, each merge replaced by the pairs it merges.
func (f *flattener) pairs(m *yaml.Node, pairs *[]*yaml.Node) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if err := f.count(k.Line); err != nil {
			return err
		}
		if k.Kind != yaml.ScalarNode || k.Value != "<<" || k.ShortTag() != "!!merge" {
			*pairs = append(*pairs, k, v)
			continue
		}
		var err error
		switch {
		case v.Kind == yaml.SequenceNode:
			for j := len(v.Content) - 1; j >= 0 && err == nil; j-- {
				err = f.merge(v.Content[j], pairs)
			}
		default:
			err = f.merge(v, pairs)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// merge appends the pairs of the mapping that a merge key's value n (or an element of it)
// stands for.
func (f *flattener) merge(n *yaml.Node, pairs *[]*yaml.Node) error {
	if n = deref(n); n.Kind != yaml.MappingNode {
		return f.fail(n.Line, "error loading config file: yaml: map merge requires map or sequence of maps as the value")
	}
	if err := f.enter(n); err != nil {
		return err
	}
	defer delete(f.open, n)
	return f.pairs(n, pairs)
}

// enter marks n, a mapping or a sequence, as being read, and refuses it when it already is:
// reached again through an alias within itself, it would expand without end.
func (f *flattener) enter(n *yaml.Node) error {
	if f.open[n] {
		return f.fail(n.Line, "error loading config file: yaml: anchor '%s' value contains itself", n.Anchor)
	}
	f.open[n] = true
	return nil
}

// mergeFields returns the rate_limit that yaml.v2's structs read from prev, then next: a
// mapping decoded into the struct an earlier one made, field by field; a null one dropping it.
func mergeFields(prev, next *yaml.Node) *yaml.Node {
	switch {
	case prev.Kind != yaml.MappingNode && prev.ShortTag() != "!!null":
		return prev // yaml.v2 failed on it, and fails the file
	case prev.Kind != yaml.MappingNode || next.Kind != yaml.MappingNode:
		return next
	}
	c := *next
	c.Content = append([]*yaml.Node(nil), prev.Content...)
	for i := 0; i+1 < len(next.Content); i += 2 {
		k, v := next.Content[i], next.Content[i+1]
		j := 0
		for k.ShortTag() == "!!str" && j < len(c.Content) && (c.Content[j].ShortTag() != "!!str" || c.Content[j].Value != k.Value) {
			j += 2
		}
		if k.ShortTag() != "!!str" || j == len(c.Content) {
			c.Content = append(c.Content, k, v)
		} else {
			c.Content[j], c.Content[j+1] = k, v
		}
	}
	return &c
}
