package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Build is what `trellis version` reports about the binary.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// Modified: the commit's files had uncommitted changes when it was
	// built; nil when unknown.
	Modified *bool `json:"modified,omitempty"`
	// BuildDate is the commit's date, as Go stamps it (vcs.time): a
	// build of the same commit is the same binary, so the date of the
	// commit is the date of the build, and nothing depends on the clock.
	BuildDate string `json:"build_date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Stamp holds what a build set with -ldflags -X. A field that is set wins
// over the build information Go records; `make build` sets them because
// Go records no VCS information from a git worktree or under
// GOFLAGS=-buildvcs=false.
type Stamp struct {
	Version   string
	Commit    string
	BuildDate string
	Modified  string // "true" or "false"
}

// Unknown stands for what the binary does not record.
const (
	UnknownVersion = "(devel)"
	Unknown        = "unknown"
)

// ReadBuild combines the build information Go recorded in the binary
// (nil when there is none) with what -ldflags stamped.
func ReadBuild(info *debug.BuildInfo, stamp Stamp) Build {
	b := Build{
		Version:   UnknownVersion,
		Commit:    Unknown,
		BuildDate: Unknown,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info != nil {
		if v := info.Main.Version; v != "" {
			b.Version = v
		}
		if info.GoVersion != "" {
			b.GoVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.BuildDate = s.Value
			case "vcs.modified":
				m := s.Value == "true"
				b.Modified = &m
			}
		}
	}
	if stamp.Version != "" {
		b.Version = stamp.Version
	}
	if stamp.Commit != "" {
		b.Commit = stamp.Commit
	}
	if stamp.BuildDate != "" {
		b.BuildDate = stamp.BuildDate
	}
	if stamp.Modified == "true" || stamp.Modified == "false" {
		m := stamp.Modified == "true"
		b.Modified = &m
	}
	return b
}

// String is the text `trellis version` and `trellis --version` print.
func (b Build) String() string {
	commit := b.Commit
	if b.Modified != nil && *b.Modified {
		commit += " (with uncommitted changes)"
	}
	var s strings.Builder
	fmt.Fprintf(&s, "trellis %s\n", b.Version)
	fmt.Fprintf(&s, "Commit:      %s\n", commit)
	fmt.Fprintf(&s, "Build date:  %s\n", b.BuildDate)
	fmt.Fprintf(&s, "Go version:  %s %s\n", b.GoVersion, b.Platform)
	return s.String()
}
