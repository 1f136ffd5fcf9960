package cli

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestReadBuild(t *testing.T) {
	vcs := func(rev, tm, mod string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "trellis.dev/trellis", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: tm}, {Key: "vcs.modified", Value: mod}}}
	}
	tagged := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "trellis.dev/trellis", Version: "v1.2.3"}}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name  string
		info  *debug.BuildInfo
		stamp Stamp
		want  string // the JSON of the Build
	}{
		{"no build information", nil, Stamp{},
			`{"version":"(devel)","commit":"unknown","build_date":"unknown","go_version":"` + runtime.Version() + `","platform":"` + platform + `"}`},
		{"a clean checkout", vcs("abc123", "2026-01-02T03:04:05Z", "false"), Stamp{},
			`{"version":"(devel)","commit":"abc123","modified":false,"build_date":"2026-01-02T03:04:05Z","go_version":"go1.99.1","platform":"` + platform + `"}`},
		{"local changes", vcs("abc123", "2026-01-02T03:04:05Z", "true"), Stamp{},
			`{"version":"(devel)","commit":"abc123","modified":true,"build_date":"2026-01-02T03:04:05Z","go_version":"go1.99.1","platform":"` + platform + `"}`},
		{"go install of a release", tagged, Stamp{},
			`{"version":"v1.2.3","commit":"unknown","build_date":"unknown","go_version":"go1.99.1","platform":"` + platform + `"}`},
		{"stamped by make build, no VCS recorded", &debug.BuildInfo{GoVersion: "go1.99.1"},
			Stamp{Version: "v2.0.0", Commit: "def456", BuildDate: "2026-02-03T04:05:06Z", Modified: "false"},
			`{"version":"v2.0.0","commit":"def456","modified":false,"build_date":"2026-02-03T04:05:06Z","go_version":"go1.99.1","platform":"` + platform + `"}`},
		{"a stamp wins over what Go recorded", vcs("abc123", "2026-01-02T03:04:05Z", "true"),
			Stamp{Commit: "def456", Modified: "false"},
			`{"version":"(devel)","commit":"def456","modified":false,"build_date":"2026-01-02T03:04:05Z","go_version":"go1.99.1","platform":"` + platform + `"}`},
		{"an empty stamp leaves it", vcs("abc123", "2026-01-02T03:04:05Z", "false"), Stamp{Modified: "maybe"},
			`{"version":"(devel)","commit":"abc123","modified":false,"build_date":"2026-01-02T03:04:05Z","go_version":"go1.99.1","platform":"` + platform + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(ReadBuild(tc.info, tc.stamp))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestBuildString(t *testing.T) {
	yes := true
	b := Build{Version: "v1.2.3", Commit: "abc123", Modified: &yes, BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.99.1", Platform: "linux/amd64"}
	want := `trellis v1.2.3
Commit:      abc123 (with uncommitted changes)
Build date:  2026-01-02T03:04:05Z
Go version:  go1.99.1 linux/amd64
`
	if got := b.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	b.Modified = nil
	if got := b.String(); !strings.Contains(got, "Commit:      abc123\n") {
		t.Fatalf("unknown modified:\n%s", got)
	}
}
