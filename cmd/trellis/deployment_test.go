package main

import (
	"strings"
	"testing"
)

// Mistakes in how the commands are called are refused before any request
// (the address points nowhere), with exit status 2 and the flag named.
func TestSchedulerCommandUsage(t *testing.T) {
	vars := map[string]string{"TRELLIS_ADDR": "http://127.0.0.1:1"}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"env", "create"}, "NAME: required (or -f FILE)"},
		{"", []string{"env", "create", "ls"}, "--taskdef: required"},
		{"", []string{"env", "create", "ls", "--taskdef", "ls"}, `--taskdef: "ls" names no revision`},
		{"", []string{"env", "create", "ls", "--taskdef", "ls:1", "--min-healthy-percent", "101"}, "--min-healthy-percent: 101 is outside 0-100"},
		{"", []string{"env", "create", "ls", "--taskdef", "ls:1", "--min-healthy-time", "ten"}, `--min-healthy-time: "ten" is not a duration`},
		{"", []string{"env", "create", "ls", "--taskdef", "ls:1", "-f", "-"}, "give the spec as a file or as flags, not both"},
		{"", []string{"env", "update", "ls"}, "nothing to change"},
		{"", []string{"deploy", "ls", "--version", "latest"}, `--version: "latest" is neither a version number`},
		{"", []string{"rollback", "ls", "--version", "0"}, "--version: 0: versions are numbered from 1"},
		{"", []string{"env", "status", "ls", "-o", "xml"}, `-o: "xml" is not an output format: use table, json or yaml`},
	} {
		code, out, errOut := run(t, tc.stdin, vars, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q\nstdout: %s\nstderr: %s", tc.args, code, tc.want, out, errOut)
		}
	}
	// A bad spec file is refused before any request, naming the field.
	code, _, errOut := run(t, "name: ls\ntask_definition: ls:1\ndeployment: {min_healthy_percent: 200}\n", vars, "env", "create", "-f", "-")
	if code != 1 || !strings.Contains(errOut, "stdin:3: deployment.min_healthy_percent: 200 is outside 0-100") {
		t.Errorf("bad spec: exit %d: %s", code, errOut)
	}
}
