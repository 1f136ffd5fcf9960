package ca

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"trellis.dev/trellis/internal/resource"
)

// trustDomainSuffix ends every trust domain, so that a Trellis trust
// domain can never be mistaken for a DNS name someone owns.
const trustDomainSuffix = ".trellis"

// TrustDomain is the SPIFFE trust domain of the cluster whose id (a uuid
// fixed at the cluster's first start) is clusterID.
func TrustDomain(clusterID string) string {
	return strings.ToLower(clusterID) + trustDomainSuffix
}

// Identity is a SPIFFE id a leaf certificate can carry: a ServiceID, an
// AgentID or a ServerID.
type Identity interface {
	URI() *url.URL
	String() string
}

// ServiceID identifies a service of a namespace in a datacenter:
// spiffe://<td>/ns/<ns>/dc/<dc>/svc/<svc>.
type ServiceID struct {
	TrustDomain, Namespace, Datacenter, Service string
}

// URI is the id as the URI SAN of a certificate.
func (id ServiceID) URI() *url.URL {
	return &url.URL{
		Scheme: "spiffe",
		Host:   id.TrustDomain,
		Path:   "/ns/" + id.Namespace + "/dc/" + id.Datacenter + "/svc/" + id.Service,
	}
}

func (id ServiceID) String() string { return id.URI().String() }

// DNSName is the DNS SAN of the service's leaves,
// <svc>.svc.<ns>.<dc>.trellis, for clients that check a host name
// rather than a URI SAN.
func (id ServiceID) DNSName() string {
	return id.Service + ".svc." + id.Namespace + "." + id.Datacenter + trustDomainSuffix
}

// AgentID identifies a client agent (by its instance) in a datacenter:
// spiffe://<td>/agent/client/dc/<dc>/id/<instance>.
type AgentID struct {
	TrustDomain, Datacenter, Instance string
}

// URI is the id as the URI SAN of a certificate.
func (id AgentID) URI() *url.URL {
	return &url.URL{
		Scheme: "spiffe",
		Host:   id.TrustDomain,
		Path:   "/agent/client/dc/" + id.Datacenter + "/id/" + id.Instance,
	}
}

func (id AgentID) String() string { return id.URI().String() }

// ServerID identifies a server (by its Raft node id) in a datacenter:
// spiffe://<td>/server/dc/<dc>/id/<server>. Only a server signs one, for
// itself, with the signing key it holds (SignServerLeaf); the signing
// service refuses a CSR that asks for one (ReasonServerID), so that no
// agent or service can ever hold a server's identity.
type ServerID struct {
	TrustDomain, Datacenter, Server string
}

// URI is the id as the URI SAN of a certificate.
func (id ServerID) URI() *url.URL {
	return &url.URL{
		Scheme: "spiffe",
		Host:   id.TrustDomain,
		Path:   "/server/dc/" + id.Datacenter + "/id/" + id.Server,
	}
}

func (id ServerID) String() string { return id.URI().String() }

// Check refuses a server id that ParseID would not read back: a trust
// domain that is not a lower-case DNS name, a datacenter or server that
// is not a lower-case DNS label.
func (id ServerID) Check() error {
	if err := CheckTrustDomain(id.TrustDomain); err != nil {
		return fmt.Errorf("%q is not a SPIFFE id: %w", id.String(), err)
	}
	if err := checkSegments("datacenter", id.Datacenter, "server", id.Server); err != nil {
		return fmt.Errorf("%q is not a SPIFFE id: %w", id.String(), err)
	}
	return nil
}

// TrustDomainURI is the URI SAN of a CA certificate of trust domain td:
// spiffe://<td>, with no path.
func TrustDomainURI(td string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: td}
}

// ParseIDString parses s as a URL and then as ParseID does.
func ParseIDString(s string) (Identity, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URI", s)
	}
	if strings.Contains(s, "#") {
		// url.Parse forgets an empty fragment; the text still has one.
		return nil, fmt.Errorf("%q is not a SPIFFE id: it has a fragment", s)
	}
	return ParseID(u)
}

// ParseID reads a service, an agent or a server SPIFFE id. It accepts
// exactly the three forms ServiceID, AgentID and ServerID write, in lower
// case, and refuses anything more: a certificate's identity must have one spelling, or two spellings
// of one service could be granted different rights.
func ParseID(u *url.URL) (Identity, error) {
	if u == nil {
		return nil, errors.New("no URI")
	}
	if err := checkIDURL(u); err != nil {
		return nil, fmt.Errorf("%q is not a SPIFFE id: %w", u.String(), err)
	}
	seg := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	switch {
	case len(seg) == 6 && seg[0] == "ns" && seg[2] == "dc" && seg[4] == "svc":
		id := ServiceID{TrustDomain: u.Host, Namespace: seg[1], Datacenter: seg[3], Service: seg[5]}
		if err := checkSegments("namespace", id.Namespace, "datacenter", id.Datacenter, "service", id.Service); err != nil {
			return nil, fmt.Errorf("%q is not a SPIFFE id: %w", u.String(), err)
		}
		return id, nil
	case len(seg) == 6 && seg[0] == "agent" && seg[1] == "client" && seg[2] == "dc" && seg[4] == "id":
		id := AgentID{TrustDomain: u.Host, Datacenter: seg[3], Instance: seg[5]}
		if err := checkSegments("datacenter", id.Datacenter, "instance", id.Instance); err != nil {
			return nil, fmt.Errorf("%q is not a SPIFFE id: %w", u.String(), err)
		}
		return id, nil
	case len(seg) == 5 && seg[0] == "server" && seg[1] == "dc" && seg[3] == "id":
		id := ServerID{TrustDomain: u.Host, Datacenter: seg[2], Server: seg[4]}
		if err := checkSegments("datacenter", id.Datacenter, "server", id.Server); err != nil {
			return nil, fmt.Errorf("%q is not a SPIFFE id: %w", u.String(), err)
		}
		return id, nil
	}
	return nil, fmt.Errorf("%q is not a SPIFFE id: its path is none of /ns/<ns>/dc/<dc>/svc/<svc>, /agent/client/dc/<dc>/id/<instance>, /server/dc/<dc>/id/<server>", u.String())
}

// checkIDURL refuses every part of a URL that a SPIFFE id of ours does not
// have, and a trust domain that is not a lower-case DNS name.
func checkIDURL(u *url.URL) error {
	switch {
	case u.Scheme != "spiffe":
		return fmt.Errorf("the scheme is %q, not spiffe", u.Scheme)
	case u.Opaque != "":
		return errors.New("it is not of the form spiffe://<trust-domain>/<path>")
	case u.User != nil:
		return errors.New("it has user information")
	case u.RawQuery != "" || u.ForceQuery:
		return errors.New("it has a query")
	case u.Fragment != "" || u.RawFragment != "":
		return errors.New("it has a fragment")
	case u.Port() != "" || strings.Contains(u.Host, ":"):
		return errors.New("its trust domain has a port")
	case u.RawPath != "" || strings.Contains(u.Path, "%"):
		// An escaped path has two spellings; ours never needs escaping.
		return errors.New("its path is percent-encoded")
	}
	return CheckTrustDomain(u.Host)
}

// CheckTrustDomain refuses a trust domain that is not a lower-case DNS
// name (labels of a-z, 0-9 and inner '-', joined by dots).
func CheckTrustDomain(td string) error {
	if td == "" {
		return errors.New("its trust domain is empty")
	}
	if len(td) > 253 {
		return errors.New("its trust domain is longer than 253 characters")
	}
	for _, label := range strings.Split(td, ".") {
		if !resource.IsDNSLabel(label) {
			return fmt.Errorf("its trust domain %q is not a lower-case DNS name", td)
		}
	}
	return nil
}

// checkSegments takes (name, value) pairs and refuses the first value that
// is not a lower-case DNS label.
func checkSegments(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		name, v := pairs[i], pairs[i+1]
		if v == "" {
			return fmt.Errorf("its %s is empty", name)
		}
		if !resource.IsDNSLabel(v) {
			return fmt.Errorf("its %s %q is not a lower-case DNS label (a-z, 0-9, inner '-', at most 63 characters)", name, v)
		}
	}
	return nil
}
