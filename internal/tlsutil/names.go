package tlsutil

import (
	"fmt"
	"net"
	"strings"
)

// Defaults of the naming scheme, Consul's with "trellis" for "consul".
const (
	DefaultDomain     = "trellis"
	DefaultDatacenter = "dc1"
)

// ServerName is the DNS name every server certificate of a datacenter
// carries, and the name a peer must present to be taken for a server:
// server.dc1.trellis.
func ServerName(datacenter, domain string) string {
	return "server." + datacenter + "." + domain
}

// ConnectServerName is the name a server's Connect CA leaf carries beside
// ServerName, and the name (SNI) a client asks for to be served that leaf
// rather than the server's certificate file: server.dc1.connect.trellis.
// A client asks for it only when it can verify a leaf of the Connect CA
// (it follows the CA's roots); any other name is served the file, so
// that the CLI and a first-join agent, which hold only the cluster CA,
// never meet a certificate they cannot check.
func ConnectServerName(datacenter, domain string) string {
	return "server." + datacenter + ".connect." + domain
}

// ClientName is the DNS name of a client (agent, CLI) certificate:
// client.dc1.trellis.
func ClientName(datacenter, domain string) string {
	return "client." + datacenter + "." + domain
}

// ControlName is the name an agent's control certificate carries
// (KindControl), which clients of its TCP control address check.
func ControlName(datacenter, domain string) string {
	return "control." + datacenter + "." + domain
}

// CheckDatacenter refuses a datacenter name that cannot be one DNS label,
// since it becomes one in ServerName.
func CheckDatacenter(dc string) error {
	if err := checkLabel(dc); err != nil {
		return fmt.Errorf("%q is not a datacenter name: %w", dc, err)
	}
	return nil
}

// CheckDomain refuses a domain that is not a DNS name (one or more labels
// joined by dots).
func CheckDomain(domain string) error {
	if err := checkDNSName(domain); err != nil {
		return fmt.Errorf("%q is not a domain: %w", domain, err)
	}
	return nil
}

// CheckDNSName refuses a name that cannot be a DNS subject alternative
// name. A leading "*." (a wildcard) is allowed.
func CheckDNSName(name string) error {
	if err := checkDNSName(strings.TrimPrefix(name, "*.")); err != nil {
		return fmt.Errorf("%q is not a DNS name: %w", name, err)
	}
	return nil
}

// ParseIPs parses IP addresses, naming the first that is not one.
func ParseIPs(addrs []string) ([]net.IP, error) {
	ips := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil {
			return nil, fmt.Errorf("%q is not an IP address", a)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

func checkDNSName(name string) error {
	if name == "" {
		return fmt.Errorf("it is empty")
	}
	if len(name) > 253 {
		return fmt.Errorf("it is longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if err := checkLabel(label); err != nil {
			return err
		}
	}
	return nil
}

// checkLabel accepts RFC 1123 labels in lower case: names in certificates
// are compared case-insensitively, so allowing upper case would only let
// two spellings of one name into file names.
func checkLabel(label string) error {
	if label == "" {
		return fmt.Errorf("it has an empty label")
	}
	if len(label) > 63 {
		return fmt.Errorf("label %q is longer than 63 characters", label)
	}
	for i, r := range label {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i != 0 && i != len(label)-1:
		default:
			return fmt.Errorf("use lower-case letters, digits and inner hyphens (label %q)", label)
		}
	}
	return nil
}
