package raft

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
)

// TestHCLogAdapterFormats checks that the values raft and raft-wal hand
// to hclog for formatting (hclog.Fmt and friends) come out formatted, as
// hclog's own logger prints them, and that everything else is untouched.
func TestHCLogAdapterFormats(t *testing.T) {
	servers := []hraft.Server{{Suffrage: hraft.Voter, ID: "s1", Address: "127.0.0.1:7702"}}
	cases := []struct {
		name string
		log  func(hclog.Logger)
		want string
	}{
		{"a format with a struct verb (raft's configuration)",
			func(l hclog.Logger) { l.Info("updating configuration", "servers", hclog.Fmt("%+v", servers)) },
			`msg="updating configuration" logger=raft servers="[{Suffrage:Voter ID:s1 Address:127.0.0.1:7702}]"`},
		{"a format with an escaped percent (snapshot restore progress)",
			func(l hclog.Logger) {
				l.Info("snapshot restore progress", "percent-complete", hclog.Fmt("%0.2f%%", 42.5))
			},
			`percent-complete=42.50%`},
		{"a format with several verbs",
			func(l hclog.Logger) { l.Info("installing snapshot", "received", hclog.Fmt("%d / %d", 10, 20)) },
			`received="10 / 20"`},
		{"an empty list of servers",
			func(l hclog.Logger) { l.Info("config", "servers", hclog.Fmt("%+v", []hraft.Server{})) },
			`servers=[]`},
		{"a format value in implied args",
			func(l hclog.Logger) { l.With("peer", hclog.Fmt("%s:%d", "127.0.0.1", 7702)).Warn("failed") },
			`logger=raft peer=127.0.0.1:7702`},
		{"a format whose first element is not a string is not a format",
			func(l hclog.Logger) { l.Info("odd", "v", hclog.Format{1, "%d"}) },
			`v="1 %d"`},
		{"an empty format",
			func(l hclog.Logger) { l.Info("empty", "v", hclog.Format{}) },
			`v=""`},
		{"hex, octal and binary",
			func(l hclog.Logger) { l.Info("n", "h", hclog.Hex(255), "o", hclog.Octal(8), "b", hclog.Binary(5)) },
			`h=0xff o=010 b=0b101`},
		{"a quoted string is quoted once",
			func(l hclog.Logger) { l.Info("q", "s", hclog.Quote("a\nb")) },
			`s="a\nb"`},
		{"a plain string with a percent sign is left alone",
			func(l hclog.Logger) { l.Info("plain", "path", "/tmp/100%d") },
			`path=/tmp/100%d`},
		{"a plain slice is left to the handler",
			func(l hclog.Logger) { l.Info("slice", "ids", []string{"a", "b"}) },
			`ids="[a b]"`},
		{"a trailing stack trace gets a key",
			func(l hclog.Logger) { l.Error("panic", "k", 1, hclog.CapturedStacktrace("main.go:1")) },
			`k=1 stacktrace=main.go:1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)), "raft")
			c.log(l)
			if out := buf.String(); !strings.Contains(out, c.want) {
				t.Errorf("got  %s\nwant it to contain %s", out, c.want)
			}
		})
	}
}
