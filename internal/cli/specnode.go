package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// This file reads a spec file into a tree of nodes that remember their
// line, by YAML 1.2 rules, and writes the tree as JSON for protojson and
// encoding/json. The YAML library's own conversion is not used: it keeps
// no lines, and YAML 1.1 converters turn `on`, `y` and `no` into booleans
// and `0777` into 511, so a value would not be what the user wrote.

// ErrSpec is wrapped by every refusal of a spec file.
var ErrSpec = errors.New("bad spec file")

// SpecError is a refusal of a spec file. It names the file, the line of
// the node at fault and the field's path as the file spells it
// ("containers[0].env.PORT"), and says what is wrong and, where it can,
// how to fix it.
type SpecError struct {
	File   string
	Line   int    // 0: the file as a whole
	Path   string // "": the document as a whole
	Reason string
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Path != "" {
		b.WriteString(": " + e.Path)
	}
	b.WriteString(": " + e.Reason)
	return b.String()
}

func (e *SpecError) Unwrap() error { return ErrSpec }

// refusal is a SpecError without its file, which the caller adds.
func refusal(line int, path, format string, args ...any) *SpecError {
	return &SpecError{Line: line, Path: path, Reason: fmt.Sprintf(format, args...)}
}

// inFile names the file of err, a refusal.
func inFile(err error, file string) error {
	var se *SpecError
	if errors.As(err, &se) {
		c := *se
		c.File = file
		return &c
	}
	return &SpecError{File: file, Reason: err.Error()}
}

type nodeKind int

const (
	nullNode nodeKind = iota
	boolNode
	intNode
	floatNode
	stringNode
	listNode
	mapNode
)

// node is one value of a spec file.
type node struct {
	kind nodeKind
	line int
	// text is a scalar as the file wrote it (a string's value).
	text string
	// json is a scalar's JSON form: a decimal for an int however it was
	// written, "Infinity" for .inf.
	json string
	// quoted: a string written in quotes or as a block (hints tell an
	// unquoted string from one the user meant as a string).
	quoted  bool
	items   []*node
	entries []entry
}

// entry is one key of a mapping.
type entry struct {
	key   string
	line  int // the key's line
	value *node
}

// field returns the entry of a mapping with this key.
func (n *node) field(key string) (entry, bool) {
	for _, e := range n.entries {
		if e.key == key {
			return e, true
		}
	}
	return entry{}, false
}

// describe names a node's kind for "..., not X".
func (n *node) describe() string {
	switch n.kind {
	case nullNode:
		return "null"
	case listNode:
		return "a list"
	case mapNode:
		return "a mapping"
	case stringNode:
		return strconv.Quote(n.text)
	}
	return n.text
}

// toJSON writes the node as JSON.
func (n *node) toJSON() []byte {
	var b bytes.Buffer
	n.writeJSON(&b)
	return b.Bytes()
}

func (n *node) writeJSON(b *bytes.Buffer) {
	switch n.kind {
	case listNode:
		b.WriteByte('[')
		for i, it := range n.items {
			if i > 0 {
				b.WriteByte(',')
			}
			it.writeJSON(b)
		}
		b.WriteByte(']')
	case mapNode:
		b.WriteByte('{')
		for i, e := range n.entries {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonString(e.key))
			b.WriteByte(':')
			e.value.writeJSON(b)
		}
		b.WriteByte('}')
	default:
		b.WriteString(n.json)
	}
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// Paths name fields as the file does: keys joined by dots, list indexes in
// brackets, and keys that are not plain words quoted in brackets
// (metadata["app.kubernetes.io/name"]).

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func joinKey(path, key string) string {
	if !plainKey.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func joinIndex(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// parseSpec reads every document of a spec file: one JSON value, or a YAML
// stream of documents separated by "---" lines. Empty and comment-only
// documents are left out.
func parseSpec(data []byte) ([]*node, error) {
	isJSON := false
	if t := bytes.TrimSpace(data); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		isJSON = json.Valid(t)
	}
	if err := checkText(data, !isJSON); err != nil {
		return nil, err
	}
	if isJSON {
		// JSON by JSON's rules: YAML parsers refuse some valid JSON ("\/",
		// tabs before a key).
		n, err := parseJSON(data)
		if err != nil {
			return nil, err
		}
		return []*node{n}, nil
	}
	return parseYAML(data)
}

// checkText refuses what is not UTF-8 text, and for YAML the control
// characters YAML does not allow, naming the line: the YAML parser would
// refuse them without one, and the JSON one would read bad UTF-8 as U+FFFD.
func checkText(data []byte, yaml bool) error {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return refusal(line, "", "not UTF-8 text (byte 0x%02x)", data[i])
		case r == '\n':
			line++
		case yaml && (r < 0x20 && r != '\t' && r != '\r' || r == 0x7f || r >= 0x80 && r <= 0x9f && r != 0x85):
			return refusal(line, "", "a control character (U+%04X) is not allowed in YAML", r)
		}
		i += size
	}
	return nil
}

// yamlErrorLine reads the line out of the YAML library's error. Its
// numbers are not all alike: the scanner's count from 1, the parser's
// from 0, and neither gives a line on the first one.
var yamlErrorLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlParserProblems are the parser's messages (its lines count from 0);
// the others come from the scanner.
var yamlParserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'", "did not find expected <document start>",
	"did not find expected '-' indicator", "did not find expected key", "did not find expected node content",
	"did not find expected <stream-start>", "found duplicate %YAML directive", "found duplicate %TAG directive",
	"found incompatible YAML document", "found undefined tag handle",
}

func yamlSyntaxError(err error, data []byte) error {
	m := yamlErrorLine.FindStringSubmatch(err.Error())
	if m == nil {
		return refusal(0, "", "malformed YAML: %v", err)
	}
	line, problem := 1, m[2]
	if a := unknownAnchor.FindStringSubmatch(problem); a != nil {
		return refusal(aliasLine(data, a[1]), "", "malformed YAML: *%s names no anchor: define &%s before it", a[1], a[1])
	}
	if m[1] != "" {
		line, _ = strconv.Atoi(m[1])
		for _, p := range yamlParserProblems {
			if strings.HasPrefix(problem, p) {
				line++
				break
			}
		}
	}
	lines := strings.Split(string(data), "\n")
	last := len(lines)
	for last > 1 && strings.TrimSpace(lines[last-1]) == "" {
		last--
	}
	if line > last {
		// The parser reached the end of the file inside something open.
		return refusal(last, "", "malformed YAML: %s: the file ends first; is a bracket or a quote left open?", problem)
	}
	return refusal(line, "", "malformed YAML: %s%s", problem, syntaxHint(problem, lines[line-1]))
}

// syntaxHint says how to fix the syntax errors people make most. text is
// the line the error points at.
func syntaxHint(problem, text string) string {
	indent := text[:len(text)-len(strings.TrimLeft(text, " \t"))]
	colons := strings.Count(text, ": ")
	if strings.HasSuffix(strings.TrimSpace(text), ":") {
		colons++
	}
	switch {
	case strings.Contains(indent, "\t"):
		return ": indent with spaces, not tabs"
	case problem == "mapping values are not allowed in this context" && colons > 1:
		return `: a value that holds ": " must be quoted`
	case problem == "mapping values are not allowed in this context", problem == "did not find expected key":
		return ": check the indentation"
	case problem == "did not find expected ',' or ']'":
		return ": a [ opened here is not closed"
	case problem == "did not find expected ',' or '}'":
		return ": a { opened here is not closed"
	case problem == "found unexpected end of stream":
		return ": a quote opened here is not closed"
	case problem == "found character that cannot start any token":
		return ": quote the value (YAML reserves @ and ` to start one)"
	case problem == "did not find expected '-' indicator":
		return `: every item of the list that starts here begins with "- "`
	}
	return ""
}

var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// aliasLine is the line of the first use of *name: the library names no
// line for an alias without an anchor.
func aliasLine(data []byte, name string) int {
	use := regexp.MustCompile(`\*` + regexp.QuoteMeta(name) + `([\s,\]}]|$)`)
	for i, l := range strings.Split(string(data), "\n") {
		if use.MatchString(l) {
			return i + 1
		}
	}
	return 0
}

func parseYAML(data []byte) ([]*node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, yamlSyntaxError(err, data)
		}
		if len(doc.Content) == 0 {
			continue
		}
		c := &converter{budget: maxNodes}
		n, err := c.convert(doc.Content[0], "")
		if err != nil {
			return nil, err
		}
		if n.kind != nullNode {
			docs = append(docs, n)
		}
	}
}

// maxNodes bounds the nodes one document may expand to, so that aliases
// of aliases cannot make a small file huge.
const maxNodes = 1 << 18

type converter struct {
	budget int
	// open are the collections being converted: an alias to one of them
	// would make a value that contains itself.
	open map[*yaml.Node]bool
}

func (c *converter) convert(y *yaml.Node, path string) (*node, error) {
	if c.budget--; c.budget < 0 {
		return nil, refusal(y.Line, path, "the document expands to more than %d values (aliases of aliases?)", maxNodes)
	}
	tag := ""
	if y.Style&yaml.TaggedStyle != 0 {
		tag = shortTag(y.Tag)
	}
	if y.Kind == yaml.SequenceNode || y.Kind == yaml.MappingNode {
		if c.open == nil {
			c.open = map[*yaml.Node]bool{}
		}
		c.open[y] = true
		defer delete(c.open, y)
	}
	switch y.Kind {
	case yaml.AliasNode:
		if c.open[y.Alias] {
			return nil, refusal(y.Line, path, "*%s is inside the value of &%s: a value cannot contain itself", y.Value, y.Value)
		}
		n, err := c.convert(y.Alias, path)
		if err != nil {
			return nil, err
		}
		if n.kind >= listNode {
			return n, nil
		}
		at := *n // the line of the use, not of the anchor
		at.line = y.Line
		return &at, nil
	case yaml.ScalarNode:
		return scalar(y, tag, path)
	case yaml.SequenceNode:
		if tag != "" && tag != "!!seq" {
			return nil, refusal(y.Line, path, "the tag %s is not supported here: leave it out", y.Tag)
		}
		n := &node{kind: listNode, line: y.Line}
		for i, item := range y.Content {
			v, err := c.convert(item, joinIndex(path, i))
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		return n, nil
	case yaml.MappingNode:
		if tag != "" && tag != "!!map" {
			return nil, refusal(y.Line, path, "the tag %s is not supported here: leave it out", y.Tag)
		}
		return c.mapping(y, path)
	}
	return nil, refusal(y.Line, path, "unexpected YAML node")
}

func (c *converter) mapping(y *yaml.Node, path string) (*node, error) {
	n := &node{kind: mapNode, line: y.Line}
	seen := map[string]int{}
	var merged []entry
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return nil, refusal(k.Line, path, "a key must be a name, not a list or a mapping")
		}
		if k.Tag == "!!merge" && k.Style == 0 {
			// "<<: *defaults" copies the keys of another mapping that
			// this one does not set.
			from, err := c.mergeSources(v, joinKey(path, "<<"))
			if err != nil {
				return nil, err
			}
			merged = append(merged, from...)
			continue
		}
		p := joinKey(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			return nil, refusal(k.Line, p, "given twice (first at line %d)", first)
		}
		seen[k.Value] = k.Line
		value, err := c.convert(v, p)
		if err != nil {
			return nil, err
		}
		n.entries = append(n.entries, entry{key: k.Value, line: k.Line, value: value})
	}
	for _, e := range merged {
		if _, set := seen[e.key]; !set {
			seen[e.key] = e.line
			n.entries = append(n.entries, e)
		}
	}
	return n, nil
}

// mergeSources are the entries a merge key brings: of one mapping, or of
// a list of them, the first to set a key winning.
func (c *converter) mergeSources(v *yaml.Node, path string) ([]entry, error) {
	src, err := c.convert(v, path)
	if err != nil {
		return nil, err
	}
	switch src.kind {
	case mapNode:
		return src.entries, nil
	case listNode:
		var out []entry
		seen := map[string]bool{}
		for _, it := range src.items {
			if it.kind != mapNode {
				return nil, refusal(it.line, path, "a merge takes mappings, not %s", it.describe())
			}
			for _, e := range it.entries {
				if !seen[e.key] {
					seen[e.key] = true
					out = append(out, e)
				}
			}
		}
		return out, nil
	}
	return nil, refusal(src.line, path, "a merge takes a mapping, not %s", src.describe())
}

func shortTag(tag string) string {
	if rest, ok := strings.CutPrefix(tag, "tag:yaml.org,2002:"); ok {
		return "!!" + rest
	}
	return tag
}

// scalar resolves a YAML scalar. Quoted and block scalars are strings;
// an explicit tag says what a plain one is; otherwise the YAML 1.2 core
// schema decides.
func scalar(y *yaml.Node, tag, path string) (*node, error) {
	quoted := y.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	switch tag {
	case "":
		if quoted {
			return stringValue(y.Value, y.Line, true), nil
		}
		return resolvePlain(y.Value, y.Line), nil
	case "!", "!!str", "!!binary", "!!timestamp":
		return stringValue(y.Value, y.Line, true), nil
	case "!!int", "!!float", "!!bool", "!!null":
		n := resolvePlain(y.Value, y.Line)
		want := map[string]nodeKind{"!!int": intNode, "!!float": floatNode, "!!bool": boolNode, "!!null": nullNode}[tag]
		switch {
		case n.kind == want:
		case want == floatNode && n.kind == intNode:
			n.kind = floatNode
		default:
			return nil, refusal(y.Line, path, "%q is not a %s value", y.Value, tag)
		}
		return n, nil
	}
	return nil, refusal(y.Line, path, "the tag %s is not supported: leave it out", y.Tag)
}

func stringValue(s string, line int, quoted bool) *node {
	return &node{kind: stringNode, line: line, text: s, json: jsonString(s), quoted: quoted}
}

var (
	yamlDecimal = regexp.MustCompile(`^[-+]?[0-9]+$`)
	yamlOctal   = regexp.MustCompile(`^0o[0-7]+$`)
	yamlHex     = regexp.MustCompile(`^0x[0-9a-fA-F]+$`)
	yamlFloat   = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	yamlInf     = regexp.MustCompile(`^[-+]?\.(inf|Inf|INF)$`)
	yamlNaN     = regexp.MustCompile(`^\.(nan|NaN|NAN)$`)
)

// resolvePlain is the YAML 1.2 core schema: null, true and false, and
// numbers are what they look like; every other plain scalar is a string,
// as written (yes, no, on, off, y, n, 1_000, 2024-01-01).
func resolvePlain(s string, line int) *node {
	n := &node{line: line, text: s}
	switch {
	case s == "" || s == "~" || s == "null" || s == "Null" || s == "NULL":
		n.kind, n.json = nullNode, "null"
	case s == "true" || s == "True" || s == "TRUE":
		n.kind, n.json = boolNode, "true"
	case s == "false" || s == "False" || s == "FALSE":
		n.kind, n.json = boolNode, "false"
	case yamlDecimal.MatchString(s):
		v, _ := new(big.Int).SetString(strings.TrimPrefix(s, "+"), 10)
		n.kind, n.json = intNode, v.String()
	case yamlOctal.MatchString(s):
		v, _ := new(big.Int).SetString(s[2:], 8)
		n.kind, n.json = intNode, v.String()
	case yamlHex.MatchString(s):
		v, _ := new(big.Int).SetString(s[2:], 16)
		n.kind, n.json = intNode, v.String()
	case yamlFloat.MatchString(s):
		f, _ := strconv.ParseFloat(s, 64)
		n.kind, n.json = floatNode, floatJSON(f)
	case yamlInf.MatchString(s):
		sign := 1
		if s[0] == '-' {
			sign = -1
		}
		n.kind, n.json = floatNode, floatJSON(math.Inf(sign))
	case yamlNaN.MatchString(s):
		n.kind, n.json = floatNode, floatJSON(math.NaN())
	default:
		return stringValue(s, line, false)
	}
	return n
}

// floatJSON is protojson's form of a float: a number, or "Infinity",
// "-Infinity" and "NaN" as strings.
func floatJSON(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return `"Infinity"`
	case math.IsInf(f, -1):
		return `"-Infinity"`
	case math.IsNaN(f):
		return `"NaN"`
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// parseJSON reads one JSON value (already known to be valid) into nodes,
// with the line each value starts on.
func parseJSON(data []byte) (*node, error) {
	lines := []int{0} // offsets where lines start
	for i, c := range data {
		if c == '\n' {
			lines = append(lines, i+1)
		}
	}
	p := &jsonParser{dec: json.NewDecoder(bytes.NewReader(data)), data: data, lineStarts: lines}
	p.dec.UseNumber()
	return p.value("")
}

type jsonParser struct {
	dec        *json.Decoder
	data       []byte
	lineStarts []int
}

// next reads a token and the line it starts on: the first byte after
// the previous token that is not space, ',' or ':'.
func (p *jsonParser) next() (json.Token, int, error) {
	off := int(p.dec.InputOffset())
	for off < len(p.data) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	tok, err := p.dec.Token()
	line := sort.Search(len(p.lineStarts), func(i int) bool { return p.lineStarts[i] > off })
	return tok, line, err
}

func (p *jsonParser) value(path string) (*node, error) {
	tok, line, err := p.next()
	if err != nil {
		return nil, refusal(line, path, "malformed JSON: %v", err)
	}
	return p.fromToken(tok, line, path)
}

func (p *jsonParser) fromToken(tok json.Token, line int, path string) (*node, error) {
	switch t := tok.(type) {
	case nil:
		return &node{kind: nullNode, line: line, text: "null", json: "null"}, nil
	case bool:
		return &node{kind: boolNode, line: line, text: strconv.FormatBool(t), json: strconv.FormatBool(t)}, nil
	case json.Number:
		n := &node{kind: floatNode, line: line, text: t.String(), json: t.String()}
		if yamlDecimal.MatchString(t.String()) {
			n.kind = intNode
		}
		return n, nil
	case string:
		return stringValue(t, line, true), nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: listNode, line: line}
			for p.dec.More() {
				v, err := p.value(joinIndex(path, len(n.items)))
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			_, _, err := p.next() // ]
			return n, err
		case '{':
			n := &node{kind: mapNode, line: line}
			seen := map[string]int{}
			for p.dec.More() {
				tok, keyLine, err := p.next()
				if err != nil {
					return nil, err
				}
				key, _ := tok.(string)
				kp := joinKey(path, key)
				if first, dup := seen[key]; dup {
					return nil, refusal(keyLine, kp, "given twice (first at line %d)", first)
				}
				seen[key] = keyLine
				v, err := p.value(kp)
				if err != nil {
					return nil, err
				}
				n.entries = append(n.entries, entry{key: key, line: keyLine, value: v})
			}
			_, _, err := p.next() // }
			return n, err
		}
	}
	return nil, refusal(line, path, "malformed JSON: unexpected %v", tok)
}

// lookup finds the node a field path names ("data.containers[0].env",
// `metadata["team"]`), matching keys written in snake_case or camelCase.
// It returns the path as the file spells it and the line to point at;
// the part of the path the file does not have (a field that is missing)
// is kept as given, and the line is that of the deepest node found.
func lookup(root *node, path string) (string, int) {
	segs := splitPath(path)
	n, line, out := root, root.line, ""
	for i, s := range segs {
		var next *node
		switch {
		case s.index >= 0 && n.kind == listNode && s.index < len(n.items):
			next = n.items[s.index]
			out, line = joinIndex(out, s.index), next.line
		case s.index < 0 && n.kind == mapNode:
			for _, e := range n.entries {
				if e.key == s.key || foldName(e.key) == foldName(s.key) {
					next = e.value
					out, line = joinKey(out, e.key), e.line
					break
				}
			}
		}
		if next == nil {
			for _, rest := range segs[i:] {
				if rest.index >= 0 {
					out = joinIndex(out, rest.index)
				} else {
					out = joinKey(out, rest.key)
				}
			}
			return out, line
		}
		n = next
	}
	return out, line
}

// foldName makes stop_timeout and stopTimeout the same name.
func foldName(s string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
}

type pathSeg struct {
	key   string
	index int // -1 for a key
}

var pathSegment = regexp.MustCompile(`^(?:\.?([A-Za-z0-9_-]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\])`)

// splitPath splits a field path into keys and indexes; what does not
// parse ends the path.
func splitPath(path string) []pathSeg {
	var out []pathSeg
	for path != "" {
		m := pathSegment.FindStringSubmatch(path)
		if m == nil {
			break
		}
		switch {
		case m[1] != "":
			out = append(out, pathSeg{key: m[1], index: -1})
		case m[2] != "":
			i, _ := strconv.Atoi(m[2])
			out = append(out, pathSeg{index: i})
		default:
			k, err := strconv.Unquote(m[3])
			if err != nil {
				return out
			}
			out = append(out, pathSeg{key: k, index: -1})
		}
		path = path[len(m[0]):]
	}
	return out
}
