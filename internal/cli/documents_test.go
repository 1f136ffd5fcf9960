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
			[]string{"core/v1/Namespace a   @f:1", "core/v1/Namespace b   @f:2"}},
		{"a JSON list of documents", "[\n  {\"type\": \"core/v1/Namespace\", \"name\": \"a\"},\n  {\"type\": \"core/v1/Namespace\", \"name\": \"b\"}\n]\n",
			[]string{"core/v1/Namespace a   @f:2", "core/v1/Namespace b   @f:3"}},
		{"YAML 1.2 strings stay strings", "type: test/v1/Probe\nname: a\ndata: {flag: on, answer: y, mode: 0777}\n",
			[]string{`test/v1/Probe a  {"flag":"on","answer":"y","mode":777} @f:1`}},
		{"metadata and version", "type: core/v1/Namespace\nname: a\nversion: \"42\"\nmetadata: {team: web}\n",
			[]string{"core/v1/Namespace a   @f:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := ParseDocuments([]byte(tc.in), "f", nil)
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
	docs, _ := ParseDocuments([]byte("type: core/v1/Namespace\nname: a\nversion: \"42\"\nmetadata: {team: web}\n"), "f", nil)
	if docs[0].Version != "42" || docs[0].Metadata["team"] != "web" {
		t.Fatalf("fields lost: %+v", docs[0])
	}
}

func TestParseDocumentsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty file", "", "f: no documents in it"},
		{"only comments", "# hi\n---\n", "f: no documents in it"},
		{"bad YAML, line of the file", "type: core/v1/Namespace\nname: a\n---\ntype: core/v1/Namespace\nname: [b\n",
			"f:5: malformed YAML: did not find expected ',' or ']': a [ opened here is not closed"},
		{"missing type", "name: a\n", "f:1: type: missing (group/version/kind, for example core/v1/Namespace)"},
		{"bad type", "name: a\ntype: Namespace\n", `f:2: type: "Namespace" is not group/version/kind (for example core/v1/Namespace)`},
		{"missing name", "type: core/v1/Namespace\n", "f:1: name: missing"},
		{"unknown field", "type: core/v1/Namespace\nname: a\nkind: Namespace\n",
			"f:3: kind: unknown field (a document has: type, name, namespace, metadata, version, owner, data)"},
		{"misspelt field", "type: core/v1/Namespace\nname: a\nnmae: b\n", "f:3: nmae: unknown field: did you mean name?"},
		{"wrong field type", "type: core/v1/Namespace\nname: [a]\n", "f:2: name: a string is needed, not a list"},
		{"a number for the version", "type: core/v1/Namespace\nname: a\nversion: 42\n", `f:3: version: a string is needed: quote it ("42")`},
		{"a label that is a number", "type: core/v1/Namespace\nname: a\nmetadata:\n  tier: 1\n", `f:4: metadata.tier: a string is needed: quote it ("1")`},
		{"data not a mapping", "type: test/v1/Probe\nname: a\ndata: [1]\n", "f:3: data: a mapping of the type's fields is needed, not a list"},
		{"not a mapping", "just a string\n", `f:1: a document must be a mapping with the fields type, name, namespace, metadata, version, owner, data, not "just a string"`},
		{"error in the second document", "type: core/v1/Namespace\nname: a\n---\ntype: core/v1/Namespace\n", "f:4: name: missing"},
		{"bad list member", "- {type: core/v1/Namespace, name: a}\n- {name: b}\n", "f:2: type: missing (group/version/kind, for example core/v1/Namespace)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDocuments([]byte(tc.in), "f", nil)
			if err == nil || !errors.Is(err, ErrSpec) || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// With the types a server serves, a document's data is checked against
// its type, and the document meets the server's checks, each refusal at
// its line, before anything is written.
func TestParseDocumentsKnownTypes(t *testing.T) {
	const ok = "type: core/v1/Namespace\nname: good\n---\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a number for a string", ok + "type: core/v1/Namespace\nname: b\ndata:\n  description: 42\n",
			`f:7: data.description: a string is needed: quote it ("42")`},
		{"an unknown data field", ok + "type: core/v1/Namespace\nname: b\ndata:\n  descripton: x\n",
			"f:7: data.descripton: unknown field: did you mean description?"},
		{"a bad name", ok + "type: core/v1/Namespace\nname: Bad_Name\n",
			`f:5: name: "Bad_Name" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`},
		{"a namespace for a cluster type", ok + "type: core/v1/Namespace\nname: b\nnamespace: prod\n",
			`f:6: namespace: must be empty: core/v1/Namespace is cluster-scoped (got "prod")`},
		{"a bad label key", ok + "type: core/v1/Namespace\nname: b\nmetadata:\n  \"a b\": x\n",
			`f:7: metadata["a b"]: key is not valid: must be an optional DNS subdomain and '/', then 1 to 63 characters of letters, digits, '-', '_' or '.' starting and ending with a letter or digit (like a Kubernetes label key)`},
		{"an owner without uid", ok + "type: core/v1/Namespace\nname: b\nowner: {type: {group: core, group_version: v1, kind: Namespace}, name: c}\n",
			"f:6: owner.uid: is required: an owner is one incarnation of a resource, named by its uid"},
		{"a type's own check", ok + "type: orchestrator/v1/TaskDefinition\nname: web-1\ndata:\n  family: web\n  revision: 1\n  containers:\n    - name: app\n      driver: exec\n",
			"f:10: data.containers[0].command: is required by the exec driver: the program and its arguments"},
		{"a timestamp that is a date", ok + "type: orchestrator/v1/Task\nname: t\ndata:\n  created_at: 2024-05-01\n",
			`f:7: data.created_at: "2024-05-01" is not a valid Timestamp: write it as RFC 3339, like "2024-05-01T10:00:00Z"`},
		{"a description too long", ok + "type: core/v1/Namespace\nname: b\ndata: {description: " + strings.Repeat("x", 1025) + "}\n",
			"f:6: data.description: is 1025 characters long, over the limit of 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDocuments([]byte(tc.in), "f", testTypes())
			if err == nil || !errors.Is(err, ErrSpec) || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
	// A type this client does not know is left to the server.
	docs, err := ParseDocuments([]byte("type: test/v9/Unknown\nname: a\ndata: {anything: [1, on]}\n"), "f", testTypes())
	if err != nil || string(docs[0].Data) != `{"anything":[1,"on"]}` {
		t.Fatalf("unknown type: %v %v", docs, err)
	}
}
