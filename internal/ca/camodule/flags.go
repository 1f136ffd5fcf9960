package camodule

import (
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/hostport"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/tlsutil"
)

// The CA's flags, on `trellis server` only (trellis dev is one primary
// datacenter that presents no Connect leaf to anyone): the federation
// (-primary-datacenter, -primary-address) and the server's own leaf
// (-connect-server-certs). The server's help explains them at length.

// exampleServerAddr is a server-to-server address, the kind
// -primary-address takes (server.DefaultServerAddr).
const exampleServerAddr = "127.0.0.1:7703"

// Flags declares the CA's flags of process p.
func (m *caModule) Flags(fs *pflag.FlagSet, p module.Process) {
	if p != module.Server {
		return
	}
	fs.StringVar(&m.cfg.PrimaryDatacenter, "primary-datacenter", m.cfg.PrimaryDatacenter,
		"the datacenter whose Connect CA is the federation's (default: this server's -datacenter, which makes this cluster the primary); another name makes this cluster a secondary, which needs -primary-address")
	fs.StringSliceVar(&m.cfg.PrimaryAddrs, "primary-address", m.cfg.PrimaryAddrs,
		"server-to-server address (host:port, the primary servers' -server-addr) of a server of -primary-datacenter, which a secondary's CA gets its roots and intermediate from, presenting this server's certificate; repeatable or comma-separated, tried in turn")
	fs.VarPF(invertedBool{&m.cfg.DisableServerCerts}, "connect-server-certs", "",
		"once the Connect CA has a root, sign this server a leaf of it and present it to the servers and agents that ask for it (false: present -tls-cert-file only)").NoOptDefVal = "true"
}

// CheckFlags checks -primary-datacenter and -primary-address against the
// server's datacenter: a secondary needs at least one address of the
// primary, a primary takes none, and each is a host:port another machine
// can dial.
func (m *caModule) CheckFlags(s module.Settings) error {
	c := m.cfg
	if c.PrimaryDatacenter != "" {
		if err := tlsutil.CheckDatacenter(c.PrimaryDatacenter); err != nil {
			return fmt.Errorf("-primary-datacenter: %w", err)
		}
	}
	if c.PrimaryDatacenter == "" || c.PrimaryDatacenter == s.Datacenter {
		if len(c.PrimaryAddrs) > 0 {
			return fmt.Errorf("-primary-address: only a secondary datacenter takes it: give -primary-datacenter, the primary's datacenter, other than this server's -datacenter %q", s.Datacenter)
		}
		return nil
	}
	if len(c.PrimaryAddrs) == 0 {
		return fmt.Errorf("-primary-address: required: -primary-datacenter %q makes this cluster (%q) a secondary, which needs the server-to-server address (-server-addr) of a server of %q (for example %s)",
			c.PrimaryDatacenter, s.Datacenter, c.PrimaryDatacenter, exampleServerAddr)
	}
	seen := map[string]bool{}
	for _, a := range c.PrimaryAddrs {
		if err := hostport.Check(a, exampleServerAddr); err != nil {
			return fmt.Errorf("-primary-address: %w", err)
		}
		host, port, _ := net.SplitHostPort(a)
		if ip := net.ParseIP(host); host == "" || port == "0" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("-primary-address: %q: give the host and server-to-server port (-server-addr) of a server of %q (for example %s)", a, c.PrimaryDatacenter, exampleServerAddr)
		}
		if seen[a] {
			return fmt.Errorf("-primary-address: %q given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// invertedBool is a bool flag bound to the negation of *p: the flag says
// what is on by default, the Config field what turns it off, so that
// Config's zero value stays the production setting.
type invertedBool struct{ p *bool }

func (b invertedBool) String() string { return strconv.FormatBool(!*b.p) }
func (b invertedBool) Type() string   { return "bool" }
func (b invertedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = !v
	return nil
}
