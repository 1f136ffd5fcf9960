package harness

import (
	"maps"
	"testing"
)

func TestCells(t *testing.T) {
	all := []string{"start", "fleet", "rss", "daemon"}
	for _, tc := range []struct {
		list string
		want map[string]bool
		err  string
	}{
		{"start,fleet,rss,daemon", map[string]bool{"start": true, "fleet": true, "rss": true, "daemon": true}, ""},
		{" daemon ,, start", map[string]bool{"daemon": true, "start": true}, ""},
		{"", map[string]bool{}, ""},
		{"start,fleets", nil, `-cells: "fleets" is not one of start, fleet, rss, daemon`},
		{"start,fleet rss", nil, `-cells: "fleet rss" is not one of start, fleet, rss, daemon`},
	} {
		got, err := Cells(tc.list, all)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Cells(%q): %v, want the error %q", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("Cells(%q) = %v, %v; want %v", tc.list, got, err, tc.want)
		}
	}
}
