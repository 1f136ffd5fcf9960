package cli

import (
	"strings"
	"testing"
)

func TestArgNames(t *testing.T) {
	for _, tc := range []struct{ use, want string }{
		{"get TYPE NAME", "TYPE NAME"},
		{"logs TASK [CONTAINER]", "TASK CONTAINER"},
		{"stop ENV [ID]", "ENV ID"},
		{"set-attribute NAME KEY=VALUE...", "NAME KEY=VALUE"},
		{"remove-attribute NAME KEY...", "NAME KEY"},
		{"show FAMILY[:REVISION]", "FAMILY[:REVISION]"},
		{"remove-peer ID|RAFT-ADDRESS", "ID|RAFT-ADDRESS"},
		{"create [NAME] (-f FILE | --taskdef FAMILY:REVISION [flags])", "NAME"},
		{"update NAME (-f FILE | flags)", "NAME"},
		{"deploy ENV [--version V] [--wait]", "ENV"},
		{"diff NAME [--version V]", "NAME"},
		{"run --taskdef FAMILY[:REVISION] --instance NAME", ""},
		{"apply -f FILE", ""},
		{"sim -instances N -server ADDR", ""},
		{"list", ""},
		{"", ""},
	} {
		if got := strings.Join(ArgNames(tc.use), " "); got != tc.want {
			t.Errorf("ArgNames(%q) = %q, want %q", tc.use, got, tc.want)
		}
	}
}

func TestCheckArgsNotBlank(t *testing.T) {
	for _, tc := range []struct {
		names, args []string
		want        string
	}{
		{[]string{"TYPE", "NAME"}, []string{"core/v1/Namespace", "payments"}, ""},
		{[]string{"TYPE", "NAME"}, []string{"core/v1/Namespace", ""}, "NAME: must not be empty"},
		{[]string{"TYPE", "NAME"}, []string{"", "payments"}, "TYPE: must not be empty"},
		{[]string{"TASK"}, []string{" \t"}, `TASK: " \t" is blank`},
		// The last name stands for the arguments after it.
		{[]string{"NAME", "KEY"}, []string{"node-1", "zone", ""}, "KEY: must not be empty"},
		{nil, []string{"x", ""}, "argument 2: must not be empty"},
		{nil, nil, ""},
	} {
		err := CheckArgsNotBlank(tc.names, tc.args)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckArgsNotBlank(%q, %q) = %q, want %q", tc.names, tc.args, got, tc.want)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, tc := range []struct {
		suggestions []string
		want        string
	}{
		{nil, `unknown command "creat" for "trellis env"`},
		{[]string{"create"}, "unknown command \"creat\" for \"trellis env\"\n\nDid you mean this?\n\tcreate"},
		{[]string{"get", "diff"}, "unknown command \"creat\" for \"trellis env\"\n\nDid you mean this?\n\tget\n\tdiff"},
	} {
		if got := UnknownCommand("trellis env", "creat", tc.suggestions).Error(); got != tc.want {
			t.Errorf("UnknownCommand(%q) = %q, want %q", tc.suggestions, got, tc.want)
		}
	}
}
