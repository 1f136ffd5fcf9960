package cli

import (
	"errors"
	"strconv"
	"testing"
)

// A spec file reads by YAML 1.2 rules: only true/false are booleans, and
// numbers are what they look like; everything else is a string as written.
func TestSpecValuesFollowYAML12(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a: on", `{"a":"on"}`},
		{"a: off", `{"a":"off"}`},
		{"a: y", `{"a":"y"}`},
		{"a: n", `{"a":"n"}`},
		{"a: yes", `{"a":"yes"}`},
		{"a: No", `{"a":"No"}`},
		{"a: true", `{"a":true}`},
		{"a: FALSE", `{"a":false}`},
		{"a: ~", `{"a":null}`},
		{"a:", `{"a":null}`},
		{"a: Null", `{"a":null}`},
		{"a: 8080", `{"a":8080}`},
		{"a: +12", `{"a":12}`},
		{"a: -7", `{"a":-7}`},
		{"a: 0777", `{"a":777}`}, // 1.1 read octal 511
		{"a: 0o17", `{"a":15}`},
		{"a: 0x1F", `{"a":31}`},
		{"a: 1_000", `{"a":"1_000"}`},
		{"a: 123456789012345678901234567890", `{"a":123456789012345678901234567890}`},
		{"a: 1.5", `{"a":1.5}`},
		{"a: 1.", `{"a":1}`},
		{"a: .5e3", `{"a":500}`},
		{"a: .inf", `{"a":"Infinity"}`},
		{"a: -.Inf", `{"a":"-Infinity"}`},
		{"a: .nan", `{"a":"NaN"}`},
		{"a: 2024-05-01", `{"a":"2024-05-01"}`},
		{"a: 10s", `{"a":"10s"}`},
		{"a: '8080'", `{"a":"8080"}`},
		{`a: "true"`, `{"a":"true"}`},
		{"a: !!str 8080", `{"a":"8080"}`},
		{"a: !!float 1", `{"a":1}`},
		{"a: !!binary aGk=", `{"a":"aGk="}`},
		{"a: |\n  two\n  lines\n", `{"a":"two\nlines\n"}`},
		{"a: >-\n  folded\n  text\n", `{"a":"folded text"}`},
		{"on: 1\ny: 2", `{"on":1,"y":2}`}, // keys too stay as written
		{"a: <b> & c", `{"a":"<b> & c"}`},
		{"a: &x [1, 2]\nb: *x", `{"a":[1,2],"b":[1,2]}`},
		{"base: &base {a: 1, b: 2}\nc: {<<: *base, b: 3}", `{"base":{"a":1,"b":2},"c":{"b":3,"a":1}}`},
		{"c: {<<: [{a: 1}, {a: 2, b: 2}]}", `{"c":{"a":1,"b":2}}`},
		// JSON is read by JSON's rules, including what YAML parsers refuse.
		{"{\n\t\"a\": \"x\\/y\",\n\t\"b\": [1, 2.5, true, null]\n}", `{"a":"x/y","b":[1,2.5,true,null]}`},
		{`{"a": "on", "b": "\u00e9"}`, `{"a":"on","b":"é"}`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			docs, err := parseSpec([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) != 1 {
				t.Fatalf("%d documents", len(docs))
			}
			if got := string(docs[0].toJSON()); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Every value keeps the line it is on, in YAML streams and in JSON.
func TestSpecLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		path     string
		want     string // path as the file spells it, and line
	}{
		{"a key", "a: 1\nb:\n  c: 2\n", "b.c", "b.c:3"},
		{"a list item", "a:\n  - x\n  - y\n", "a[1]", "a[1]:3"},
		{"the second document", "a: 1\n---\n# c\nb: 2\n", "b", "b:4"},
		{"camelCase as written", "stopTimeout: 5\n", "stop_timeout", "stopTimeout:1"},
		{"a missing field: its parent", "a:\n  - name: x\n", "a[0].command", "a[0].command:2"},
		{"a quoted key", "metadata:\n  app.io/name: x\n", `metadata["app.io/name"]`, `metadata["app.io/name"]:2`},
		{"JSON", "{\n  \"a\": [\n    {\"b\": 1},\n    {\"b\": 2}\n  ]\n}\n", "a[1].b", "a[1].b:4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := parseSpec([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			root := docs[len(docs)-1]
			path, line := lookup(root, tc.path)
			if got := path + ":" + strconv.Itoa(line); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// What the parser refuses names the line, and says how to fix what people
// get wrong most.
func TestSpecSyntaxErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unclosed [", "a: 1\nb: [1, 2\nc: 3\n", `f:2: malformed YAML: did not find expected ',' or ']': a [ opened here is not closed`},
		{"unclosed {", "a: 1\nb: {c: 1\nd: 2\n", `f:2: malformed YAML: did not find expected ',' or '}': a { opened here is not closed`},
		{"unclosed quote", "a: 1\nb: \"unclosed\nc: 2\n", "f:2: malformed YAML: found unexpected end of stream: a quote opened here is not closed"},
		{"the file ends inside", "a: 1\nb: 2\n---\nc: [\n\n", "f:4: malformed YAML: did not find expected node content: the file ends first; is a bracket or a quote left open?"},
		{"a colon in a value", "command: /bin/sh -c: x\n", `f:1: malformed YAML: mapping values are not allowed in this context: a value that holds ": " must be quoted`},
		{"over-indented key", "a:\n  b: 1\n   c: 2\n", "f:3: malformed YAML: mapping values are not allowed in this context: check the indentation"},
		{"under-indented key", "a: 1\nb:\n  c: 1\n d: 2\n", "f:4: malformed YAML: did not find expected key: check the indentation"},
		{"tab indent", "a:\n\tb: 1\n", "f:2: malformed YAML: found character that cannot start any token: indent with spaces, not tabs"},
		{"reserved character", "a: @x\n", "f:1: malformed YAML: found character that cannot start any token: quote the value (YAML reserves @ and ` to start one)"},
		{"unknown alias", "a: 1\nb: *nope\n", "f:2: malformed YAML: *nope names no anchor: define &nope before it"},
		{"alias inside itself", "a: &x [1, *x]\n", "f:1: a[1]: *x is inside the value of &x: a value cannot contain itself"},
		{"bad explicit tag value", "a: !!int x\n", `f:1: a: "x" is not a !!int value`},
		{"unknown tag", "a: !custom x\n", "f:1: a: the tag !custom is not supported: leave it out"},
		{"duplicate key", "a: 1\nb:\n  c: 1\n  c: 2\n", "f:4: b.c: given twice (first at line 3)"},
		{"duplicate key in JSON", "{\"a\": 1,\n \"a\": 2}", "f:2: a: given twice (first at line 1)"},
		{"a key that is a list", "[a]: 1\n", "f:1: a key must be a name, not a list or a mapping"},
		{"control character", "a: 1\nb: \x01\n", "f:2: a control character (U+0001) is not allowed in YAML"},
		{"C1 control character", "a: 1\nb: \u0090\n", "f:2: a control character (U+0090) is not allowed in YAML"},
		{"not UTF-8 in JSON", "{\"a\":\n \"\xff\"}", "f:2: not UTF-8 text (byte 0xff)"},
		{"not UTF-8", "a: 1\n\nb: \xff\n", "f:3: not UTF-8 text (byte 0xff)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSpec([]byte(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			if got := inFile(err, "f").Error(); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !errors.Is(inFile(err, "f"), ErrSpec) {
				t.Fatal("not an ErrSpec")
			}
		})
	}
}

func TestClosest(t *testing.T) {
	names := []string{"name", "driver", "image", "command", "env", "working_dir", "stop_timeout", "task_definition", "health_check"}
	for _, tc := range []struct{ in, want string }{
		{"nmae", "name"},
		{"stop_timout", "stop_timeout"},
		{"StopTimeout", "stop_timeout"},
		{"workdir", ""},
		{"working_directory", "working_dir"},
		{"taskdef", "task_definition"},
		{"healthcheck", "health_check"},
		{"cmd", ""},
		{"colour", ""},
		{"x", ""},
	} {
		if got := closest(tc.in, names); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
