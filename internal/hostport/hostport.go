// Package hostport checks host:port addresses as the flags of servers and
// modules give them, with the same words wherever a flag is checked.
package hostport

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Check checks a host:port listen or dial address; example is an address
// of the right kind, shown when addr is not host:port at all.
func Check(addr, example string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (for example %s)", addr, example)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host != "" && net.ParseIP(host) == nil && !ValidHostname(host) {
		return fmt.Errorf("%q: %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// ValidHostname reports whether h is a DNS host name: labels of letters,
// digits and inner hyphens, at most 63 characters each, 253 in all.
func ValidHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
