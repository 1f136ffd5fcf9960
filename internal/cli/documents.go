package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"trellis.dev/trellis/internal/httpapi/wire"
)

// Document is one resource of a spec file, with where it came from.
type Document struct {
	wire.Document
	// Source is "file:line" of the document's first line (and "[i]" for
	// the i-th member of a document that is a list).
	Source string
}

// ErrSpec is wrapped by every refusal of a spec file.
var ErrSpec = errors.New("bad spec file")

// SpecError is a refusal of one document, naming where it is.
type SpecError struct {
	Source string // file:line
	Reason string
}

func (e *SpecError) Error() string { return e.Source + ": " + e.Reason }
func (e *SpecError) Unwrap() error { return ErrSpec }

func specError(source, format string, args ...any) error {
	return &SpecError{Source: source, Reason: fmt.Sprintf(format, args...)}
}

var documentFields = "type, name, namespace, metadata, version, owner, data"

// ParseDocuments reads every document of a spec file (YAML or JSON; many
// documents separated by "---" lines). name is how errors call the file.
func ParseDocuments(data []byte, name string) ([]Document, error) {
	var docs []Document
	for _, chunk := range splitDocuments(data) {
		source := fmt.Sprintf("%s:%d", name, chunk.line)
		js, err := yaml.YAMLToJSON(chunk.text)
		if err != nil {
			return nil, yamlError(err, name, chunk.line)
		}
		js = bytes.TrimSpace(js)
		switch {
		case bytes.Equal(js, []byte("null")):
			continue // only comments
		case len(js) > 0 && js[0] == '[':
			var items []json.RawMessage
			if err := json.Unmarshal(js, &items); err != nil {
				return nil, specError(source, "%v", err)
			}
			for i, item := range items {
				d, err := decodeDocument(item, fmt.Sprintf("%s[%d]", source, i))
				if err != nil {
					return nil, err
				}
				docs = append(docs, d)
			}
		default:
			d, err := decodeDocument(js, source)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		return nil, specError(name, "no documents in it")
	}
	return docs, nil
}

func decodeDocument(js []byte, source string) (Document, error) {
	if len(js) == 0 || js[0] != '{' {
		return Document{}, specError(source, "a document must be a mapping with the fields %s", documentFields)
	}
	var d wire.Document
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ):
			return Document{}, specError(source, "%s: expected a %s, got a %s", typ.Field, typ.Type.Kind(), typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return Document{}, specError(source, "unknown field %s (a document has: %s)",
				strings.TrimPrefix(err.Error(), "json: unknown field "), documentFields)
		}
		return Document{}, specError(source, "%v", err)
	}
	if d.Type == "" {
		return Document{}, specError(source, "type: missing (group/version/kind, for example core/v1/Namespace)")
	}
	if _, err := wire.ParseType(d.Type); err != nil {
		return Document{}, specError(source, "type: %q is not group/version/kind (for example core/v1/Namespace)", d.Type)
	}
	if d.Name == "" {
		return Document{}, specError(source, "name: missing")
	}
	return Document{Document: d, Source: source}, nil
}

type chunk struct {
	text []byte
	line int // 1-based line of the chunk's first line
}

// splitDocuments cuts a YAML stream at "---" lines ("--- " with content
// after it starts a document on the same line, as YAML allows).
func splitDocuments(data []byte) []chunk {
	lines := strings.SplitAfter(string(data), "\n")
	var out []chunk
	cur := chunk{line: 1}
	var buf strings.Builder
	flush := func() {
		cur.text = []byte(buf.String())
		if strings.TrimSpace(buf.String()) != "" {
			out = append(out, cur)
		}
		buf.Reset()
	}
	for i, l := range lines {
		trimmed := strings.TrimRight(l, " \t\r\n")
		if trimmed == "---" || strings.HasPrefix(trimmed, "--- ") || trimmed == "..." {
			flush()
			cur = chunk{line: i + 2}
			if rest, ok := strings.CutPrefix(trimmed, "--- "); ok && !strings.HasPrefix(strings.TrimSpace(rest), "#") {
				buf.WriteString(rest + "\n")
				cur.line = i + 1
			}
			continue
		}
		buf.WriteString(l)
	}
	flush()
	return out
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlError names the file's line of a YAML syntax error (the parser
// counts from the document's start).
func yamlError(err error, name string, first int) error {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	line := first
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		line, msg = first+n-1, msg[len(m[0]):]
	}
	return specError(fmt.Sprintf("%s:%d", name, line), "malformed YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}
