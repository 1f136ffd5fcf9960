package cli

import (
	"strings"
	"testing"
)

func TestNormalizeArgs(t *testing.T) {
	long := map[string]bool{"addr": true, "data-dir": true, "http-addr": true, "retry-join": true, "help": true}
	for _, tc := range []struct{ in, want string }{
		{"server -data-dir /d -http-addr 127.0.0.1:1", "server --data-dir /d --http-addr 127.0.0.1:1"},
		{"-addr=http://x:1 resource list", "--addr=http://x:1 resource list"},
		{"--addr http://x:1", "--addr http://x:1"},
		{"server -retry-join a:1 -retry-join b:2", "server --retry-join a:1 --retry-join b:2"},
		{"resource apply -f -", "resource apply -f -"},                   // a shorthand and stdin stay
		{"resource get -o json -n prod", "resource get -o json -n prod"}, // shorthands stay
		{"resource list -ojson", "resource list -ojson"},                 // a shorthand with its value
		{"x -unknown -1", "x -unknown -1"},                               // not a long flag: left to the parser
		{"dev -help", "dev --help"},
		{"x -- -addr", "x -- -addr"}, // after --, arguments are arguments
	} {
		got := strings.Join(NormalizeArgs(strings.Fields(tc.in), long), " ")
		if got != tc.want {
			t.Errorf("NormalizeArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
