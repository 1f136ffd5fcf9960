package cli

import "strings"

// NormalizeArgs rewrites "-name" and "-name=value" to "--name..." where
// name is one of longFlags, so that single-dash long flags parse. Arguments
// after "--" and values that merely start with a dash (a lone "-" for
// stdin, "-1", an unknown "-xyz") are left as they are.
func NormalizeArgs(args []string, longFlags map[string]bool) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && longFlags[name] {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
