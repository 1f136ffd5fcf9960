package dns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	miekg "github.com/miekg/dns"
)

// HostResolvConf is the host's resolver configuration: where the agent
// finds its recursors when it is given none.
const HostResolvConf = "/etc/resolv.conf"

// ParseResolvConf returns the nameservers of a resolv.conf, in order, each
// on port 53. Lines that are not "nameserver ADDR" are skipped, and so is
// a nameserver that is not an IP address.
func ParseResolvConf(b []byte) []netip.AddrPort {
	var out []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(fields[1]); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
		}
	}
	return out
}

// HostRecursors are the nameservers of the host's /etc/resolv.conf.
func HostRecursors() ([]netip.AddrPort, error) {
	b, err := os.ReadFile(HostResolvConf)
	if err != nil {
		return nil, fmt.Errorf("reading the host's resolvers: %w", err)
	}
	return ParseResolvConf(b), nil
}

// ParseRecursor reads a -dns-recursor value: an IP address (port 53) or
// ADDR:PORT. flag names it in the error.
func ParseRecursor(flag, s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a.Unmap(), 53), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s: %q is not an IP address or ADDR:PORT (10.0.0.2, 10.0.0.2:53, [fd00::2]:53)", flag, s)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("%s: %q: the port must be 1 to 65535", flag, s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// forwardTimeout bounds the wait for one recursor's reply.
const forwardTimeout = 2 * time.Second

// errNoRecursor: every recursor failed, or there is none.
var errNoRecursor = errors.New("no recursor answered")

// forward asks the recursors, in order, the query req over network (udp
// or tcp: what the client used, so that a truncated UDP reply sends the
// client back over TCP), and returns the first reply.
func forward(ctx context.Context, recursors []netip.AddrPort, network string, req *miekg.Msg) (*miekg.Msg, error) {
	c := &miekg.Client{Net: network, Timeout: forwardTimeout}
	errs := []error{errNoRecursor}
	for _, r := range recursors {
		reply, _, err := c.ExchangeContext(ctx, req, r.String())
		if err == nil {
			return reply, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", r, err))
	}
	return nil, errors.Join(errs...)
}
