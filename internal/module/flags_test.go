package module_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// flagged declares the flags named in flags (a name, or "name/s" for a
// shorthand s) on the processes in on.
type flagged struct {
	name  string
	flags []string
	on    []module.Process
	vals  map[string]*string
}

func (f *flagged) Name() string                          { return f.name }
func (*flagged) Register(*resource.Registry)             {}
func (*flagged) Setup(module.Deps) (module.Parts, error) { return module.Parts{}, nil }
func (*flagged) CheckFlags(module.Settings) error        { return nil }
func (f *flagged) Flags(fs *pflag.FlagSet, p module.Process) {
	for _, on := range f.on {
		if on != p {
			continue
		}
		f.vals = map[string]*string{}
		for _, fl := range f.flags {
			name, short, _ := strings.Cut(fl, "/")
			f.vals[name] = fs.StringP(name, short, "", "a flag")
		}
	}
}

func TestAddFlags(t *testing.T) {
	both := []module.Process{module.Server, module.Dev}
	for _, tc := range []struct {
		name string
		mods []module.Module
		own  string // a flag the process has already
		want string // "" when accepted
	}{
		{"distinct", []module.Module{&flagged{name: "a", flags: []string{"x"}, on: both}, &flagged{name: "b", flags: []string{"y"}, on: both}}, "", ""},
		{"same name", []module.Module{&flagged{name: "a", flags: []string{"x"}, on: both}, &flagged{name: "b", flags: []string{"x"}, on: both}}, "",
			"module b declares the flag -x, which module a declares too: every flag has one owner"},
		{"same shorthand", []module.Module{&flagged{name: "a", flags: []string{"x/q"}, on: both}, &flagged{name: "b", flags: []string{"y/q"}, on: both}}, "",
			"module b declares the shorthand -q, which module a declares too"},
		{"the process's own", []module.Module{&flagged{name: "a", flags: []string{"http-addr"}, on: both}}, "http-addr",
			"module a declares the flag -http-addr, which trellis server itself declares too"},
		{"twice in one module", []module.Module{&flagged{name: "a", flags: []string{"x", "x"}, on: both}}, "",
			"module a: "},
		{"on another process only", []module.Module{&flagged{name: "a", flags: []string{"x"}, on: []module.Process{module.Dev}}, &flagged{name: "b", flags: []string{"x"}, on: both}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
			if tc.own != "" {
				fs.String(tc.own, "", "the process's")
			}
			before := 0
			fs.VisitAll(func(*pflag.Flag) { before++ })
			err := module.AddFlags(fs, module.Server, tc.mods)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("AddFlags = %v", err)
				}
				return
			}
			if !errors.Is(err, module.ErrDuplicateFlag) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AddFlags = %v, want %q", err, tc.want)
			}
			after := 0
			fs.VisitAll(func(*pflag.Flag) { after++ })
			if after != before {
				t.Errorf("a refused AddFlags added %d flags", after-before)
			}
		})
	}
}

// ParseFlags takes the flags with one dash or two, and sets the module's
// values; a flag no module declares is refused.
func TestParseFlags(t *testing.T) {
	m := &flagged{name: "a", flags: []string{"dns-addr", "domain"}, on: []module.Process{module.Server}}
	if err := module.ParseFlags([]module.Module{m}, module.Server, "-dns-addr", "127.0.0.1:8600", "--domain=trellis."); err != nil {
		t.Fatal(err)
	}
	if *m.vals["dns-addr"] != "127.0.0.1:8600" || *m.vals["domain"] != "trellis." {
		t.Errorf("parsed -dns-addr %q, -domain %q", *m.vals["dns-addr"], *m.vals["domain"])
	}
	if err := module.ParseFlags([]module.Module{m}, module.Server, "-nope", "x"); err == nil {
		t.Error("an undeclared flag was taken")
	}
	if err := module.ParseFlags([]module.Module{m}, module.Dev, "-dns-addr", "x"); err == nil {
		t.Error("a flag the module declares for server only was taken by dev")
	}
}
