package cli

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDocuments(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string // type name namespace data @source
	}{
		{"one YAML document", "type: core/v1/Namespace\nname: prod\ndata:\n  description: production\n",
			[]string{`core/v1/Namespace prod  {"description":"production"} @f:1`}},
		{"one JSON document", `{"type":"core/v1/Namespace","name":"prod","data":{}}`,
			[]string{`core/v1/Namespace prod  {} @f:1`}},
		{"many documents", "# namespaces\n---\ntype: core/v1/Namespace\nname: a\n---\ntype: test/v1/Probe\nname: b\nnamespace: prod\n...\n",
			[]string{"core/v1/Namespace a   @f:3", "test/v1/Probe b prod  @f:6"}},
		{"content on the --- line", "--- {type: core/v1/Namespace, name: a}\n--- {type: core/v1/Namespace, name: b}\n",
			[]string{"core/v1/Namespace a   @f:1", "core/v1/Namespace b   @f:2"}},
		{"empty and comment-only documents", "---\n---\n# nothing\n---\ntype: core/v1/Namespace\nname: a\n---\n",
			[]string{"core/v1/Namespace a   @f:5"}},
		{"a list of documents", "- {type: core/v1/Namespace, name: a}\n- {type: core/v1/Namespace, name: b}\n",
			[]string{"core/v1/Namespace a   @f:1[0]", "core/v1/Namespace b   @f:1[1]"}},
		{"metadata and version", "type: core/v1/Namespace\nname: a\nversion: \"42\"\nmetadata: {team: web}\n",
			[]string{"core/v1/Namespace a   @f:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := ParseDocuments([]byte(tc.in), "f")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, strings.Join([]string{d.Type, d.Name, d.Namespace, string(d.Data)}, " ")+" @"+d.Source)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	docs, _ := ParseDocuments([]byte("type: core/v1/Namespace\nname: a\nversion: \"42\"\nmetadata: {team: web}\n"), "f")
	if docs[0].Version != "42" || docs[0].Metadata["team"] != "web" {
		t.Fatalf("fields lost: %+v", docs[0])
	}
}

func TestParseDocumentsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty file", "", "f: no documents"},
		{"only comments", "# hi\n---\n", "f: no documents"},
		{"bad YAML, line of the file", "type: core/v1/Namespace\nname: a\n---\ntype: core/v1/Namespace\nname: [b\n", "f:5: malformed YAML: did not find"},
		{"missing type", "name: a\n", "f:1: type: missing"},
		{"bad type", "type: Namespace\nname: a\n", `f:1: type: "Namespace" is not group/version/kind`},
		{"missing name", "type: core/v1/Namespace\n", "f:1: name: missing"},
		{"unknown field", "type: core/v1/Namespace\nname: a\nkind: Namespace\n", `f:1: unknown field "kind"`},
		{"wrong field type", "type: core/v1/Namespace\nname: [a]\n", "f:1: name: expected a string"},
		{"not a mapping", "just a string\n", "f:1: a document must be a mapping"},
		{"error in the second document", "type: core/v1/Namespace\nname: a\n---\ntype: core/v1/Namespace\n", "f:4: name: missing"},
		{"bad list member", "- {type: core/v1/Namespace, name: a}\n- {name: b}\n", "f:1[1]: type: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDocuments([]byte(tc.in), "f")
			if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
