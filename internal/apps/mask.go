package apps

import (
	"bytes"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Masked stands for a value withheld from the reader: an environment
// value, a build argument, a label or a command in a compose document.
const Masked = "********"

// maskedPaths are the places of a compose document, by path below the
// root (* for any name), whose values may be secrets. A command is
// masked like an environment value: it can carry a password as an
// argument.
var maskedPaths = [][]string{
	{"services", "*", "environment"},
	{"services", "*", "labels"},
	{"services", "*", "command"},
	{"services", "*", "entrypoint"},
	{"services", "*", "healthcheck", "test"},
	{"services", "*", "build", "args"},
	{"services", "*", "build", "labels"},
	{"volumes", "*", "labels"},
	{"volumes", "*", "driver_opts"},
	{"networks", "*", "labels"},
	{"networks", "*", "driver_opts"},
	{"secrets", "*", "environment"},
	{"secrets", "*", "content"},
	{"configs", "*", "environment"},
	{"configs", "*", "content"},
}

// MaskCompose returns a compose document as a reader who may not read
// its secrets sees it: every value of an environment (map and KEY=value
// list forms), of build arguments, labels, driver options, commands and
// inline secret or config contents, and every value of an extension
// (x-…) anywhere, is Masked; keys stay, so the structure reads. Comments
// are dropped (they may quote a value). A document that does not parse
// is Masked as a whole. Every path that shows a document to such a
// reader goes through here.
func MaskCompose(doc string) string {
	if doc == "" {
		return ""
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		return Masked
	}
	maskNode(&root, nil)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return Masked
	}
	if err := enc.Close(); err != nil {
		return Masked
	}
	return b.String()
}

// maskNode walks n, found at path, dropping comments and masking the
// values under the masked paths and extensions.
func maskNode(n *yaml.Node, path []string) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			maskNode(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			k.HeadComment, k.LineComment, k.FootComment = "", "", ""
			p := append(path[:len(path):len(path)], k.Value)
			if strings.HasPrefix(k.Value, "x-") || isMaskedPath(p) {
				maskValues(v, !strings.HasPrefix(k.Value, "x-") && keyedList(p))
				continue
			}
			maskNode(v, p)
		}
	}
}

func isMaskedPath(p []string) bool {
	for _, m := range maskedPaths {
		if len(m) != len(p) {
			continue
		}
		match := true
		for i := range m {
			if m[i] != "*" && m[i] != p[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// keyedList says whether a list at p holds KEY=value items (environment,
// build arguments, labels), whose keys are kept.
func keyedList(p []string) bool {
	switch p[len(p)-1] {
	case "environment", "args", "labels", "driver_opts":
		return true
	}
	return false
}

// maskValues replaces every scalar under n by Masked, keeping mapping
// keys and, when keyed, the KEY= of KEY=value list items. An alias is
// masked in place, whatever it points to.
func maskValues(n *yaml.Node, keyed bool) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			n.Content[i].HeadComment, n.Content[i].LineComment, n.Content[i].FootComment = "", "", ""
			maskValues(n.Content[i+1], false)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if keyed && c.Kind == yaml.ScalarNode {
				if key, _, ok := strings.Cut(c.Value, "="); ok {
					setMasked(c, key+"="+Masked)
				}
				// A bare KEY names a variable without a value here.
				c.HeadComment, c.LineComment, c.FootComment = "", "", ""
				continue
			}
			maskValues(c, false)
		}
	case yaml.ScalarNode, yaml.AliasNode:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		setMasked(n, Masked)
	}
}

func setMasked(n *yaml.Node, v string) {
	n.Kind, n.Tag, n.Value, n.Style, n.Alias, n.Content = yaml.ScalarNode, "!!str", v, yaml.DoubleQuotedStyle, nil, nil
}
