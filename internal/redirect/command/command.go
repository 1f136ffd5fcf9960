// Package command is `trellis connect redirect-traffic`: the flags of a
// redirect.Config, checked, then the rules printed (--dry-run), applied
// or removed in this network namespace or the one of --netns. It is a
// local command, not a client of the API: it runs where the namespace is,
// as root, as the agent runs it for a mesh task.
package command

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/redirect"
)

// NewRedirectTrafficCmd is `redirect-traffic`, for the connect group.
func NewRedirectTrafficCmd(e *cli.Env) *cobra.Command {
	cfg := redirect.DefaultConfig()
	var (
		appPorts       []string
		excludeUIDs    []string
		excludeIn      []string
		excludeOut     []string
		netns          string
		remove, dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "redirect-traffic",
		Short: "Send a task's TCP through its sidecar proxy with iptables rules in its network namespace",
		Long: `Write iptables NAT rules that send a network namespace's TCP through the
sidecar proxy without the app knowing (seed 004, App Mesh's init container):

  outbound  TCP the namespace sends to an address not its own goes to the
            proxy's outbound port (chain TRELLIS_OUTBOUND, from OUTPUT); the
            proxy reads the original destination with SO_ORIGINAL_DST. The
            proxy's user and group, and the excluded users, ports and CIDRs,
            go straight out.
  inbound   TCP from outside the namespace to the app's ports (--app-port)
            goes to the proxy's inbound port (chain TRELLIS_INBOUND, from
            PREROUTING). Without --app-port, inbound traffic is left alone.
  DNS       with --dns-resolver and --dns-redirect-to, DNS queries to the
            resolver (an address, or a CIDR: 0.0.0.0/0 for any) go to another
            server (chain TRELLIS_DNS, from OUTPUT).

The rules of each IP version are written in one iptables-restore, so that a
failure leaves the namespace as it was. Running the command again replaces
the rules: there is only ever one set. --remove deletes them; --dry-run
prints them and changes nothing. Needs root (CAP_NET_ADMIN in the
namespace) and the iptables tools, nf_tables or legacy.`,
		Example: `  # what would be written: seed 004's rules
  trellis connect redirect-traffic --app-port 8080 --exclude-outbound-port 22 --dry-run

  # in a task's namespace: the app listens on 8080, the proxy runs as 1337
  trellis connect redirect-traffic --netns /run/netns/web --app-port 8080

  # every inbound port but ssh, IPv6 too, and the database reached directly
  trellis connect redirect-traffic --app-port all --exclude-inbound-port 22 \
      --exclude-outbound-cidr 169.254.169.254/32,10.20.0.0/16 --ipv6

  # the app's DNS queries to 10.0.0.2 answered by the agent on 127.0.0.1:8600
  trellis connect redirect-traffic --dns-resolver 10.0.0.2 --dns-redirect-to 127.0.0.1:8600

  # undo
  trellis connect redirect-traffic --netns /run/netns/web --remove`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if remove {
				if err := onlyNetns(cmd.Flags()); err != nil {
					return err
				}
				return inNetns(netns, func() error { return runRemove(cmd.Context(), e.Stdout) })
			}
			if err := readAppPorts(appPorts, &cfg); err != nil {
				return err
			}
			var err error
			if cfg.ExcludeUIDs, err = readInts("--exclude-uid", "a user id", excludeUIDs); err != nil {
				return err
			}
			if cfg.ExcludeInboundPorts, err = readInts("--exclude-inbound-port", "a port number", excludeIn); err != nil {
				return err
			}
			if cfg.ExcludeOutboundPorts, err = readInts("--exclude-outbound-port", "a port number", excludeOut); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return cli.Usage(err)
			}
			if dryRun {
				return printRules(e.Stdout, cfg)
			}
			return inNetns(netns, func() error { return runApply(cmd.Context(), e.Stdout, e.Stderr, cfg) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.ProxyInboundPort, "proxy-inbound-port", cfg.ProxyInboundPort, "the proxy's port for traffic into the app")
	f.IntVar(&cfg.ProxyOutboundPort, "proxy-outbound-port", cfg.ProxyOutboundPort, "the proxy's port for the app's outbound traffic")
	f.IntVar(&cfg.ProxyUID, "proxy-uid", cfg.ProxyUID, "the user the proxy runs as: its own connections are not redirected")
	f.IntVar(&cfg.ProxyGID, "proxy-gid", cfg.ProxyGID, "the group the proxy runs as: its own connections are not redirected")
	f.StringSliceVar(&excludeUIDs, "exclude-uid", nil, "a user whose outbound connections are not redirected (repeatable, or comma-separated)")
	f.StringSliceVar(&appPorts, "app-port", nil, "a port the app listens on, whose inbound TCP goes to the proxy (repeatable, or comma-separated); all for every port")
	f.StringSliceVar(&excludeIn, "exclude-inbound-port", nil, "with --app-port all, an inbound port that is not redirected (repeatable)")
	f.StringSliceVar(&excludeOut, "exclude-outbound-port", nil, "a destination port that is not redirected (repeatable)")
	f.StringSliceVar(&cfg.ExcludeOutboundCIDRs, "exclude-outbound-cidr", cfg.ExcludeOutboundCIDRs,
		"a destination CIDR or address that is not redirected (repeatable); giving it replaces the default, so name the metadata address again to keep it; --exclude-outbound-cidr= for none")
	f.StringVar(&cfg.DNSResolver, "dns-resolver", "", "redirect DNS queries (UDP and TCP 53) sent to this address, or CIDR (0.0.0.0/0: to any resolver)...")
	f.StringVar(&cfg.DNSRedirectTo, "dns-redirect-to", "", "...to this ADDR:PORT, the agent's DNS server")
	f.BoolVar(&cfg.IPv6, "ipv6", false, "write the IPv6 rules too (ip6tables), where the namespace has an IPv6 address")
	f.StringVar(&netns, "netns", "", "the network namespace to write in, as a file (/run/netns/NAME, /proc/PID/ns/net); this one by default")
	f.BoolVar(&remove, "remove", false, "delete the rules this command wrote, and nothing else")
	f.BoolVar(&dryRun, "dry-run", false, "print the rules, as iptables-restore input, and change nothing")
	return cmd
}

// readAppPorts reads --app-port: port numbers, or all alone.
func readAppPorts(values []string, cfg *redirect.Config) error {
	cfg.AppPorts = nil
	for _, v := range values {
		if strings.EqualFold(strings.TrimSpace(v), "all") {
			cfg.AllInbound = true
			continue
		}
		port, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return cli.Usage(fmt.Errorf("--app-port: %q is not a port number, or all", v))
		}
		cfg.AppPorts = append(cfg.AppPorts, port)
	}
	return nil
}

// readInts reads a list flag of numbers: pflag's own would say
// `invalid argument "x" for "--flag" flag: strconv.Atoi: ...`.
func readInts(flag, what string, values []string) ([]int, error) {
	var out []int
	for _, v := range values {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return nil, cli.Usage(fmt.Errorf("%s: %q is not %s", flag, v, what))
		}
		out = append(out, n)
	}
	return out, nil
}

// onlyNetns refuses, with --remove, the flags that configure rules: the
// removal deletes every rule of Trellis's chains whatever they were, and
// a flag given with it was most likely meant for something else.
func onlyNetns(fs *pflag.FlagSet) error {
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if err == nil && f.Name != "remove" && f.Name != "netns" {
			err = cli.Usage(fmt.Errorf("--remove deletes every rule this command wrote: give it only --netns, not --%s", f.Name))
		}
	})
	return err
}

func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	return redirect.InNetns(path, fn)
}

func printRules(w io.Writer, cfg redirect.Config) error {
	families := []redirect.Family{redirect.IPv4}
	if cfg.IPv6 {
		families = append(families, redirect.IPv6)
	}
	var b strings.Builder
	for i, f := range families {
		rules, err := redirect.Rules(cfg, f)
		if err != nil {
			return cli.Usage(err)
		}
		if len(families) > 1 {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "# %s: %s --noflush\n", f, map[redirect.Family]string{redirect.IPv4: "iptables-restore", redirect.IPv6: "ip6tables-restore"}[f])
		}
		b.WriteString(strings.Join(rules, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func runApply(ctx context.Context, stdout, stderr io.Writer, cfg redirect.Config) error {
	res, err := redirect.Apply(ctx, cfg)
	if err != nil {
		return err
	}
	if res.IPv6Skipped {
		fmt.Fprintln(stderr, "IPv6 not redirected: the namespace has no IPv6 address but on loopback.")
	}
	inbound := "inbound TCP left alone"
	switch {
	case cfg.AllInbound:
		inbound = fmt.Sprintf("inbound TCP to port %d", cfg.ProxyInboundPort)
	case len(cfg.AppPorts) > 0:
		inbound = fmt.Sprintf("inbound TCP to ports %s to port %d", ports(cfg.AppPorts), cfg.ProxyInboundPort)
	}
	_, err = fmt.Fprintf(stdout, "Redirected (%s): outbound TCP to port %d, %s.\n", families(res.Families), cfg.ProxyOutboundPort, inbound)
	return err
}

func runRemove(ctx context.Context, stdout io.Writer) error {
	res, err := redirect.Remove(ctx)
	if err != nil {
		return err
	}
	if len(res.Families) == 0 {
		_, err = fmt.Fprintln(stdout, "No redirection to remove.")
		return err
	}
	_, err = fmt.Fprintf(stdout, "Removed the redirection (%s).\n", families(res.Families))
	return err
}

func families(fs []redirect.Family) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return strings.Join(s, ", ")
}

func ports(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
