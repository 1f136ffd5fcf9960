package module

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Process names a command line that serves modules; a module's flags go on
// the processes it declares them for.
type Process string

const (
	// Server is `trellis server`, a member of a cluster.
	Server Process = "server"
	// Dev is `trellis dev`: one server that is its own cluster, with its
	// agents, in one process.
	Dev Process = "dev"
)

// FlagModuleAnnotation is the annotation (pflag.Flag.Annotations) that
// names the module a flag of a process belongs to: the help groups the
// flags by it.
const FlagModuleAnnotation = "trellis_module"

// Flagged is a module that takes flags on the command lines of the
// processes that serve it. A flag is bound to the module's own
// configuration: the module value given to the server (server.Config.Modules)
// is the one whose flags were parsed, and its Setup reads them. A module
// built in a program rather than from a command line is configured through
// its constructor, and checked the same way.
type Flagged interface {
	Module
	// Flags adds the module's flags for process p to fs, with the defaults
	// the module has without them; a process that takes none adds nothing.
	// It only declares: the values are there once fs is parsed.
	Flags(fs *pflag.FlagSet, p Process)
	// CheckFlags checks the module's configuration, once the flags are
	// parsed and before any module is set up (server.Config.Validate
	// calls it). Its error names the flag at fault and the reason.
	CheckFlags(s Settings) error
}

// Settings are the server's own settings that a module's configuration
// may be checked against.
type Settings struct {
	// Datacenter is the server's datacenter (-datacenter), never empty.
	Datacenter string
}

// ErrDuplicateFlag refuses a flag that two modules declare, or that a
// module declares and the process has already: every flag has one owner.
var ErrDuplicateFlag = errors.New("every flag has one owner")

// AddFlags adds to fs the flags that the modules of mods declare for
// process p, each annotated with its module's name (FlagModuleAnnotation).
// A name or shorthand that two modules declare, or that one declares and
// fs has already, is refused naming both owners, and nothing is added.
func AddFlags(fs *pflag.FlagSet, p Process, mods []Module) error {
	type owned struct {
		module string
		fs     *pflag.FlagSet
	}
	var sets []owned
	owner := map[string]string{} // flag name, "-x" for a shorthand -> module
	fs.VisitAll(func(f *pflag.Flag) {
		owner[f.Name] = "trellis " + string(p)
		if f.Shorthand != "" {
			owner["-"+f.Shorthand] = "trellis " + string(p)
		}
	})
	for _, m := range mods {
		fm, ok := m.(Flagged)
		if !ok {
			continue
		}
		own := pflag.NewFlagSet(m.Name(), pflag.ContinueOnError)
		if err := declare(fm, own, p); err != nil {
			return err
		}
		var err error
		own.VisitAll(func(f *pflag.Flag) {
			for _, key := range []string{f.Name, "-" + f.Shorthand} {
				if key == "-" || err != nil {
					continue
				}
				if prev, ok := owner[key]; ok {
					what := "the flag -" + key
					if key[0] == '-' {
						what = "the shorthand " + key
					}
					err = fmt.Errorf("module %s declares %s, which %s declares too: %w", m.Name(), what, ownerWords(prev), ErrDuplicateFlag)
				}
				owner[key] = "module " + m.Name()
			}
		})
		if err != nil {
			return err
		}
		sets = append(sets, owned{m.Name(), own})
	}
	for _, s := range sets {
		s.fs.VisitAll(func(f *pflag.Flag) {
			if f.Annotations == nil {
				f.Annotations = map[string][]string{}
			}
			f.Annotations[FlagModuleAnnotation] = []string{s.module}
			fs.AddFlag(f)
		})
	}
	return nil
}

func ownerWords(owner string) string {
	if len(owner) > 7 && owner[:7] == "module " {
		return owner
	}
	return owner + " itself"
}

// declare calls m.Flags, turning pflag's panic at a flag the module
// declares twice into an error.
func declare(m Flagged, fs *pflag.FlagSet, p Process) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("module %s: %v: %w", m.Name(), r, ErrDuplicateFlag)
		}
	}()
	m.Flags(fs, p)
	return nil
}

// ParseFlags configures mods as the command line of process p would with
// args (flags only, with one dash or two, like "-heartbeat-ttl", "2s"):
// for programs and tests that compose a server from modules.
func ParseFlags(mods []Module, p Process, args ...string) error {
	fs := pflag.NewFlagSet(string(p), pflag.ContinueOnError)
	fs.SetOutput(discard{})
	if err := AddFlags(fs, p, mods); err != nil {
		return err
	}
	long := make([]string, len(args))
	for i, a := range args {
		long[i] = a
		if name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "="); len(a) > 2 && a[0] == '-' && a[1] != '-' && fs.Lookup(name) != nil {
			long[i] = "-" + a
		}
	}
	if err := fs.Parse(long); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%q is not a flag", fs.Arg(0))
	}
	return nil
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
