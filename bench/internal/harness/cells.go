package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Cells reads a -cells flag, the comma-separated names of the cells to
// run, each of them one of all; empty names are skipped.
func Cells(list string, all []string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !slices.Contains(all, c) {
			return nil, fmt.Errorf("-cells: %q is not one of %s", c, strings.Join(all, ", "))
		}
		want[c] = true
	}
	return want, nil
}
