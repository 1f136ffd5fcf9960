package redirect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Tools chooses the iptables tools that read and write the rules.
type Tools struct {
	// Variant is "" for the tools the system chose (iptables-restore,
	// the nf_tables or the legacy backend behind it), or "nft" or
	// "legacy" for iptables-nft-restore or iptables-legacy-restore.
	Variant string
}

func (t Tools) command(family Family, op string) string {
	name := "iptables"
	if family == IPv6 {
		name = "ip6tables"
	}
	if t.Variant != "" {
		name += "-" + t.Variant
	}
	return name + "-" + op
}

// Result says which families Apply or Remove wrote.
type Result struct {
	Families []Family
	// IPv6Skipped: the configuration asked for IPv6, and the namespace
	// has no IPv6 address outside loopback, so there was nothing to
	// redirect.
	IPv6Skipped bool
}

// Apply writes cfg's rules in the current network namespace with the
// system's iptables tools: see Tools.Apply.
func Apply(ctx context.Context, cfg Config) (Result, error) { return Tools{}.Apply(ctx, cfg) }

// Remove deletes Trellis's rules from the current network namespace with
// the system's iptables tools: see Tools.Remove.
func Remove(ctx context.Context) (Result, error) { return Tools{}.Remove(ctx) }

// Apply writes cfg's rules in the nat table of the current network
// namespace (that of the calling OS thread: see InNetns), IPv4 and, when
// cfg.IPv6 is set and the namespace has an IPv6 address, IPv6. Each
// family is one iptables-restore --noflush, so that a failure leaves its
// table as it was. Rules already there are replaced, so running Apply
// twice leaves one set. When the IPv6 restore fails after the IPv4 one
// succeeded, the IPv4 nat table is restored as it was saved.
func (t Tools) Apply(ctx context.Context, cfg Config) (Result, error) {
	p, err := cfg.check()
	if err != nil {
		return Result{}, err
	}
	var res Result
	families := []Family{IPv4}
	if cfg.IPv6 {
		has, err := hasIPv6()
		if err != nil {
			return res, err
		}
		if has {
			families = append(families, IPv6)
		} else {
			res.IPv6Skipped = true
		}
	}
	saved := map[Family]string{}
	inputs := map[Family][]string{}
	for _, f := range families {
		out, err := t.save(ctx, f)
		if err != nil {
			return res, err
		}
		saved[f] = out
		inputs[f] = applyInput(p.rules(f), parseSave(out))
	}
	if err := t.write(ctx, families, saved, inputs); err != nil {
		return res, err
	}
	res.Families = families
	return res, nil
}

// write commits each family's input. With two, the IPv6 input is checked
// before the IPv4 one is committed, so that a mistake in it does not
// leave one family redirected; and should its commit fail all the same
// (the kernel checks more than --test does), the IPv4 nat table is put
// back as saved.
func (t Tools) write(ctx context.Context, families []Family, saved map[Family]string, inputs map[Family][]string) error {
	if len(families) > 1 {
		if err := t.restore(ctx, IPv6, inputs[IPv6], "--test"); err != nil {
			return err
		}
	}
	for i, f := range families {
		if err := t.restore(ctx, f, inputs[f]); err != nil {
			if i > 0 {
				if rerr := t.restore(ctx, IPv4, strings.Split(strings.TrimRight(saved[IPv4], "\n"), "\n"), "--replace"); rerr != nil {
					return fmt.Errorf("%w; and the IPv4 rules already written could not be put back: %v", err, rerr)
				}
			}
			return err
		}
	}
	return nil
}

// Remove deletes the jumps to Trellis's chains and the chains from the
// nat table of the current network namespace, IPv4 and IPv6, in one
// restore per family. A table with none of them is left alone; a missing
// ip6tables is not an error.
func (t Tools) Remove(ctx context.Context) (Result, error) {
	var res Result
	for _, f := range []Family{IPv4, IPv6} {
		if f == IPv6 {
			if _, err := exec.LookPath(t.command(f, "save")); err != nil {
				continue
			}
		}
		out, err := t.save(ctx, f)
		if err != nil {
			return res, err
		}
		if input := removeInput(parseSave(out)); input != nil {
			if err := t.restore(ctx, f, input); err != nil {
				return res, err
			}
			res.Families = append(res.Families, f)
		}
	}
	return res, nil
}

// save is the nat table as iptables-save prints it.
func (t Tools) save(ctx context.Context, f Family) (string, error) {
	name := t.command(f, "save")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, "-t", "nat")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", toolError(name, err, stderr.String(), nil)
	}
	return stdout.String(), nil
}

// restore feeds input to iptables-restore: --noflush, so that only the
// chains and rules the input names change, unless mode is "--replace"
// (the whole nat table, to put a saved one back); "--test" checks the
// input and commits nothing.
func (t Tools) restore(ctx context.Context, f Family, input []string, mode ...string) error {
	name := t.command(f, "restore")
	args := []string{"-w", "5"}
	switch {
	case len(mode) == 0:
		args = append(args, "--noflush")
	case mode[0] == "--test":
		args = append(args, "--noflush", "--test")
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(strings.Join(input, "\n") + "\n")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return toolError(name, err, stderr.String(), input)
	}
	return nil
}

// ErrTool is what every failure of an iptables tool wraps.
var ErrTool = errors.New("iptables failed")

// ToolError is an iptables tool that failed: its message, and the line of
// the input it refused when it said which.
type ToolError struct {
	Tool    string
	Message string
	Line    string // the refused input line, or ""
	Err     error
}

func (e *ToolError) Error() string {
	msg := e.Message
	if !strings.HasPrefix(msg, e.Tool+" ") { // the tools mostly name themselves, with their version
		msg = e.Tool + ": " + msg
	}
	if e.Line != "" {
		msg += " (at " + strconv.Quote(e.Line) + ")"
	}
	return msg
}

func (e *ToolError) Unwrap() []error { return []error{ErrTool, e.Err} }

// lineNumber finds the input line a tool names: "Error occurred at line:
// 5" (iptables-restore), "line 13: RULE_APPEND failed" (nf_tables),
// "ip6tables-restore: line 14 failed" (legacy, on commit).
var lineNumber = regexp.MustCompile(`\bline:? (\d+)\b`)

func toolError(name string, err error, stderr string, input []string) error {
	if errors.Is(err, exec.ErrNotFound) {
		return &ToolError{Tool: name, Message: "not found: install the iptables package (apt-get install iptables)", Err: err}
	}
	te := &ToolError{Tool: name, Err: err}
	var msg strings.Builder
	for line := range strings.Lines(stderr) {
		line = strings.TrimSpace(line)
		if m := lineNumber.FindStringSubmatch(line); m != nil && te.Line == "" {
			// nf_tables refuses some rules only when it commits, and names
			// the COMMIT line: the message is all there is then.
			if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= len(input) && input[n-1] != "COMMIT" {
				te.Line = input[n-1]
			}
		}
		if line == "" || strings.HasPrefix(line, "Try `") || strings.HasPrefix(line, "Error occurred at line") {
			continue
		}
		switch s := msg.String(); {
		case s == "":
		case strings.HasSuffix(s, ":"):
			msg.WriteString(" ")
		default:
			msg.WriteString("; ")
		}
		msg.WriteString(line)
	}
	te.Message = msg.String()
	if te.Message == "" {
		te.Message = err.Error()
	}
	return te
}

// hasIPv6 reports whether the current network namespace has an IPv6
// address on an interface other than loopback.
func hasIPv6() (bool, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return false, fmt.Errorf("listing the namespace's interfaces: %w", err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return false, fmt.Errorf("listing the addresses of %s: %w", iface.Name, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() == nil {
				return true, nil
			}
		}
	}
	return false, nil
}
