package cli

import (
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A shape is what a value of a spec file must be: a mapping with known
// fields, a list, a string, a whole number in a range... Shapes are built
// from the protobuf descriptors of the types a file describes (or written
// out, for the parts of a file that are not a protobuf message), and check
// walks a shape and a file's nodes together. It finds what protojson would
// refuse, but names the field by the path the file spells, points at its
// line, and says how to fix it; the messages of protojson do neither.

type shapeKind int

const (
	anyShape shapeKind = iota // any value: google.protobuf.Value and Struct
	objectShape
	listShape
	mapShape
	stringShape
	boolShape
	intShape
	floatShape
	bytesShape
	enumShape
	wellKnownShape // a well-known type with its own JSON form: protojson checks it
)

type shape struct {
	kind shapeKind
	// objects: what the message is called, its fields in order and by
	// every name they may be written with.
	what   string
	fields []*fieldShape
	byName map[string]*fieldShape
	// lists and maps: the shape of their items; maps: of their keys.
	elem, key *shape
	// strings: whether the field holds a duration ("10s").
	duration bool
	// whole numbers: the range, and whether 8080.0 and "8080" will do
	// (protojson takes them; encoding/json does not).
	min, max *big.Int
	lenient  bool
	// enums: the value names.
	values []string
	// well-known types.
	wkt protoreflect.MessageType
}

type fieldShape struct {
	name     string // as the docs spell it (snake_case)
	jsonName string // protojson's lowerCamelCase name, also accepted ("" if none)
	shape    *shape
	oneof    string // the real oneof it is part of, if any
}

func object(what string, fields ...*fieldShape) *shape {
	s := &shape{kind: objectShape, what: what, byName: map[string]*fieldShape{}}
	for _, f := range fields {
		s.addField(f)
	}
	return s
}

func (s *shape) addField(f *fieldShape) {
	s.fields = append(s.fields, f)
	s.byName[f.name] = f
	if f.jsonName != "" {
		s.byName[f.jsonName] = f
	}
}

func (s *shape) fieldNames() string {
	names := make([]string, len(s.fields))
	for i, f := range s.fields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

func field(name string, s *shape) *fieldShape { return &fieldShape{name: name, shape: s} }

var (
	aString   = &shape{kind: stringShape}
	aDuration = &shape{kind: stringShape, duration: true}
	aBool     = &shape{kind: boolShape}
	anything  = &shape{kind: anyShape}
)

func listOf(elem *shape) *shape     { return &shape{kind: listShape, elem: elem} }
func mapOf(key, elem *shape) *shape { return &shape{kind: mapShape, key: key, elem: elem} }

func wholeNumber(bits int, signed bool) *shape {
	max := new(big.Int).Lsh(big.NewInt(1), uint(bits))
	min := new(big.Int)
	if signed {
		max.Rsh(max, 1)
		min.Neg(max)
	}
	return &shape{kind: intShape, min: min, max: max.Sub(max, big.NewInt(1))}
}

func lenient(s *shape) *shape {
	s.lenient = true
	return s
}

// isDurationField tells, by its name, a string field that holds a
// duration ("10s"): the protos write durations as strings so that files
// read as people write them, and name them this way.
func isDurationField(name string) bool {
	for _, suffix := range []string{"timeout", "interval", "delay", "period", "deadline", "_time", "ttl"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

var (
	shapesMu sync.Mutex
	shapes   = map[protoreflect.FullName]*shape{}
)

// messageShape is the shape of a message's protojson form. Shapes are
// kept, so a message is walked once; a message that contains itself gets
// the shape under construction.
func messageShape(md protoreflect.MessageDescriptor) *shape {
	shapesMu.Lock()
	defer shapesMu.Unlock()
	return messageShapeLocked(md)
}

func messageShapeLocked(md protoreflect.MessageDescriptor) *shape {
	if s, ok := shapes[md.FullName()]; ok {
		return s
	}
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		s := wellKnown(md)
		shapes[md.FullName()] = s
		return s
	}
	s := object(string(md.Name()))
	shapes[md.FullName()] = s
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		f := &fieldShape{name: fd.TextName(), shape: fieldValueShape(fd)}
		if fd.JSONName() != fd.TextName() {
			f.jsonName = fd.JSONName()
		}
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
			f.oneof = string(o.Name())
		}
		s.addField(f)
	}
	return s
}

func wellKnown(md protoreflect.MessageDescriptor) *shape {
	switch md.FullName() {
	case "google.protobuf.Value", "google.protobuf.Struct", "google.protobuf.ListValue":
		return anything
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return anything // the server will judge
	}
	return &shape{kind: wellKnownShape, what: string(md.Name()), wkt: mt}
}

func fieldValueShape(fd protoreflect.FieldDescriptor) *shape {
	switch {
	case fd.IsMap():
		return mapOf(kindShape(fd.MapKey()), kindShape(fd.MapValue()))
	case fd.IsList():
		return listOf(kindShape(fd))
	}
	return kindShape(fd)
}

func kindShape(fd protoreflect.FieldDescriptor) *shape {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if isDurationField(string(fd.Name())) {
			return aDuration
		}
		return aString
	case protoreflect.BoolKind:
		return aBool
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return lenient(wholeNumber(32, true))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return lenient(wholeNumber(64, true))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return lenient(wholeNumber(32, false))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return lenient(wholeNumber(64, false))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return &shape{kind: floatShape}
	case protoreflect.BytesKind:
		return &shape{kind: bytesShape}
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		s := &shape{kind: enumShape}
		for i := 0; i < vs.Len(); i++ {
			s.values = append(s.values, string(vs.Get(i).Name()))
		}
		return s
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageShapeLocked(fd.Message())
	}
	return anything
}

// check refuses the first value of n (in the file's order) that does not
// fit s. path is n's path.
func check(s *shape, n *node, path string) error {
	if n.kind == nullNode {
		return nil // protojson and encoding/json read null as "not set"
	}
	switch s.kind {
	case anyShape:
		return nil
	case objectShape:
		return checkObject(s, n, path)
	case listShape:
		if n.kind != listNode {
			return refusal(n.line, path, "a list is needed%s", listHint(s.elem, n))
		}
		for i, it := range n.items {
			if it.kind == nullNode {
				return refusal(it.line, joinIndex(path, i), "a list item cannot be null")
			}
			if err := check(s.elem, it, joinIndex(path, i)); err != nil {
				return err
			}
		}
		return nil
	case mapShape:
		if n.kind != mapNode {
			return refusal(n.line, path, "a mapping of names to values is needed, not %s", n.describe())
		}
		for _, e := range n.entries {
			p := joinKey(path, e.key)
			if err := checkMapKey(s.key, e, p); err != nil {
				return err
			}
			if e.value.kind == nullNode {
				return refusal(e.line, p, "a value is needed (null is not one)")
			}
			if err := check(s.elem, e.value, p); err != nil {
				return err
			}
		}
		return nil
	case stringShape:
		return checkString(s, n, path)
	case boolShape:
		return checkBool(n, path)
	case intShape:
		return checkInt(s, n, path)
	case floatShape:
		switch {
		case n.kind == intNode || n.kind == floatNode:
			return nil
		case n.kind == stringNode:
			if _, err := strconv.ParseFloat(n.text, 64); err == nil || n.text == "Infinity" || n.text == "-Infinity" || n.text == "NaN" {
				return nil
			}
		}
		return refusal(n.line, path, "a number is needed, not %s", n.describe())
	case bytesShape:
		if n.kind == stringNode && isBase64(n.text) {
			return nil
		}
		return refusal(n.line, path, "base64 text is needed, not %s", n.describe())
	case enumShape:
		return checkEnum(s, n, path)
	case wellKnownShape:
		if err := protojson.Unmarshal(n.toJSON(), s.wkt.New().Interface()); err != nil {
			return refusal(n.line, path, "%s is not a valid %s%s", n.describe(), s.what, wellKnownHint(s.what))
		}
		return nil
	}
	return nil
}

func checkObject(s *shape, n *node, path string) error {
	if n.kind != mapNode {
		if n.kind == listNode && len(n.items) == 1 && n.items[0].kind == mapNode {
			return refusal(n.line, path, "a mapping is needed, not a list: remove the \"- \"")
		}
		return refusal(n.line, path, "a mapping is needed, not %s (%s has: %s)", n.describe(), s.what, s.fieldNames())
	}
	given := map[*fieldShape]entry{}
	oneofs := map[string]entry{}
	for _, e := range n.entries {
		p := joinKey(path, e.key)
		f := s.byName[e.key]
		if f == nil {
			return refusal(e.line, p, "unknown field%s", unknownFieldHint(s, e.key))
		}
		if other, dup := given[f]; dup {
			return refusal(e.line, p, "the same field as %s (line %d): give it once", other.key, other.line)
		}
		given[f] = e
		if f.oneof != "" && e.value.kind != nullNode {
			if other, dup := oneofs[f.oneof]; dup {
				return refusal(e.line, p, "cannot be given with %s (line %d): only one of them", other.key, other.line)
			}
			oneofs[f.oneof] = e
		}
		if err := check(f.shape, e.value, p); err != nil {
			return err
		}
	}
	return nil
}

func checkMapKey(s *shape, e entry, path string) error {
	switch s.kind {
	case intShape:
		n := resolvePlain(e.key, e.line)
		if n.kind != intNode {
			return refusal(e.line, path, "the key must be a whole number")
		}
		return checkInt(s, n, path)
	case boolShape:
		if e.key != "true" && e.key != "false" {
			return refusal(e.line, path, "the key must be true or false")
		}
	}
	return nil
}

func checkString(s *shape, n *node, path string) error {
	switch n.kind {
	case stringNode:
		return nil
	case intNode, floatNode:
		if s.duration {
			return refusal(n.line, path, "a duration is needed: write it with a unit, like %q", durationExample(n.text))
		}
		return refusal(n.line, path, "a string is needed: quote it (%q)", n.text)
	case boolNode:
		return refusal(n.line, path, "a string is needed: quote it (%q)", n.text)
	}
	return refusal(n.line, path, "a string is needed, not %s", n.describe())
}

// durationExample is the value with a unit, for a hint: 10 -> "10s".
func durationExample(number string) string {
	if _, err := strconv.ParseFloat(number, 64); err == nil {
		return number + "s"
	}
	return "10s"
}

// yaml11Booleans are the words YAML 1.1 read as booleans. Under YAML 1.2
// they are strings, so a bool field given one is told what to write.
var yaml11Booleans = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func checkBool(n *node, path string) error {
	if n.kind == boolNode {
		return nil
	}
	if b, ok := yaml11Booleans[n.text]; ok && n.kind == stringNode {
		return refusal(n.line, path, "true or false is needed: write %t (%q is a string)", b, n.text)
	}
	return refusal(n.line, path, "true or false is needed, not %s", n.describe())
}

func checkInt(s *shape, n *node, path string) error {
	var v *big.Int
	switch n.kind {
	case intNode:
		v, _ = new(big.Int).SetString(n.json, 10)
	case floatNode, stringNode:
		// protojson takes 8080.0, 1e3 and "8080" for a whole number.
		if f, ok := new(big.Float).SetString(n.text); ok && f.IsInt() && s.lenient {
			v, _ = f.Int(nil)
		} else if ok && f.IsInt() && n.kind == stringNode {
			return refusal(n.line, path, "a whole number is needed: write it without quotes (%s)", n.text)
		}
	}
	if v == nil {
		return refusal(n.line, path, "a whole number is needed, not %s", n.describe())
	}
	if v.Cmp(s.min) < 0 || v.Cmp(s.max) > 0 {
		return refusal(n.line, path, "%s is out of range: a whole number from %s to %s is needed", n.text, s.min, s.max)
	}
	return nil
}

func checkEnum(s *shape, n *node, path string) error {
	switch n.kind {
	case intNode:
		return nil
	case stringNode:
		for _, v := range s.values {
			if v == n.text {
				return nil
			}
		}
		hint := ""
		if c := closest(n.text, s.values); c != "" {
			hint = ": did you mean " + c + "?"
		}
		return refusal(n.line, path, "%q is not one of %s%s", n.text, strings.Join(s.values, ", "), hint)
	}
	return refusal(n.line, path, "one of %s is needed, not %s", strings.Join(s.values, ", "), n.describe())
}

func isBase64(s string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if _, err := enc.DecodeString(s); err == nil {
			return true
		}
	}
	return false
}

// listHint says how to write as a list what was written as one value:
// "/bin/sleep 100" -> ["/bin/sleep", "100"].
func listHint(elem *shape, n *node) string {
	switch n.kind {
	case stringNode:
		if elem.kind != stringShape {
			return fmt.Sprintf(", not %s", n.describe())
		}
		if strings.ContainsAny(n.text, "\"'`|&;<>$*?(){}\\") {
			return fmt.Sprintf(`: write ["/bin/sh", "-c", %s] to run it with a shell`, strconv.Quote(n.text))
		}
		words := strings.Fields(n.text)
		for i, w := range words {
			words[i] = strconv.Quote(w)
		}
		return ": write [" + strings.Join(words, ", ") + "]"
	case intNode, floatNode, boolNode:
		if elem.kind == stringShape {
			return fmt.Sprintf(": write [%q]", n.text)
		}
		return ": write [" + n.text + "]"
	case mapNode:
		return `: start each item with "- "`
	}
	return ", not " + n.describe()
}

func wellKnownHint(what string) string {
	switch what {
	case "Timestamp":
		return `: write it as RFC 3339, like "2024-05-01T10:00:00Z"`
	case "Duration":
		return `: write it in seconds, like "1.5s"`
	}
	return ""
}

func unknownFieldHint(s *shape, key string) string {
	names := make([]string, len(s.fields))
	for i, f := range s.fields {
		names[i] = f.name
	}
	if c := closest(key, names); c != "" {
		return ": did you mean " + c + "?"
	}
	return fmt.Sprintf(" (%s has: %s)", s.what, s.fieldNames())
}

// closest is the candidate nearest to s, ignoring case and '_' and '-',
// when it is near enough to be what was meant, or else the shortest that
// begins with s or that s begins with; "" when none is.
func closest(s string, candidates []string) string {
	best, bestDist := "", -1
	fs := foldName(s)
	for _, c := range candidates {
		d := editDistance(fs, foldName(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := 2
	if len(fs) > 9 {
		limit = 3
	}
	if bestDist >= 0 && bestDist <= limit && bestDist < len(fs) {
		return best
	}
	// A shortening or a lengthening of a name: taskdef for
	// task_definition, working_directory for working_dir.
	best = ""
	for _, c := range candidates {
		fc := foldName(c)
		if len(fs) >= 4 && len(fc) >= 4 && (strings.HasPrefix(fc, fs) || strings.HasPrefix(fs, fc)) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, with a swap of
// two neighbours counted as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	rows := make([][]int, len(ra)+1)
	for i := range rows {
		rows[i] = make([]int, len(rb)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			rows[i][j] = min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				rows[i][j] = min(rows[i][j], rows[i-2][j-2]+1)
			}
		}
	}
	return rows[len(ra)][len(rb)]
}
