package ca

import (
	"strings"
	"testing"
)

const (
	testTD = "0b7c3f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f.trellis"
	testDC = "dc1"
)

func TestParseIDAccepts(t *testing.T) {
	cases := []struct {
		in   string
		want Identity
	}{
		{"spiffe://" + testTD + "/ns/default/dc/dc1/svc/web",
			ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc1", Service: "web"}},
		{"spiffe://td.trellis/ns/team-a/dc/eu-west-1/svc/api-2",
			ServiceID{TrustDomain: "td.trellis", Namespace: "team-a", Datacenter: "eu-west-1", Service: "api-2"}},
		{"spiffe://" + testTD + "/agent/client/dc/dc1/id/i-0abc",
			AgentID{TrustDomain: testTD, Datacenter: "dc1", Instance: "i-0abc"}},
		{"spiffe://td.trellis/agent/client/dc/dc2/id/" + strings.Repeat("a", 63),
			AgentID{TrustDomain: "td.trellis", Datacenter: "dc2", Instance: strings.Repeat("a", 63)}},
		{"spiffe://" + testTD + "/server/dc/dc1/id/0b7c3f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f",
			ServerID{TrustDomain: testTD, Datacenter: "dc1", Server: "0b7c3f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f"}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseIDString(c.in)
			if err != nil {
				t.Fatalf("ParseIDString: %v", err)
			}
			if got != c.want {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
			// The id writes itself back exactly as it was read.
			if got.String() != c.in {
				t.Fatalf("String() = %q, want %q", got.String(), c.in)
			}
			again, err := ParseID(got.URI())
			if err != nil || again != got {
				t.Fatalf("ParseID(URI()) = %v, %v", again, err)
			}
		})
	}
}

func TestParseIDRefuses(t *testing.T) {
	cases := []struct {
		name, in, says string
	}{
		{"other scheme", "https://td.trellis/ns/default/dc/dc1/svc/web", "scheme"},
		{"no scheme", "td.trellis/ns/default/dc/dc1/svc/web", "scheme"},
		{"opaque", "spiffe:td.trellis/ns/default/dc/dc1/svc/web", "spiffe://"},
		{"empty trust domain", "spiffe:///ns/default/dc/dc1/svc/web", "trust domain is empty"},
		{"upper-case trust domain", "spiffe://TD.trellis/ns/default/dc/dc1/svc/web", "not a lower-case DNS name"},
		{"port", "spiffe://td.trellis:8443/ns/default/dc/dc1/svc/web", "port"},
		{"userinfo", "spiffe://bob@td.trellis/ns/default/dc/dc1/svc/web", "user information"},
		{"query", "spiffe://td.trellis/ns/default/dc/dc1/svc/web?x=1", "query"},
		{"empty query", "spiffe://td.trellis/ns/default/dc/dc1/svc/web?", "query"},
		{"fragment", "spiffe://td.trellis/ns/default/dc/dc1/svc/web#x", "fragment"},
		{"empty fragment", "spiffe://td.trellis/ns/default/dc/dc1/svc/web#", "fragment"},
		{"escaped path", "spiffe://td.trellis/ns/default/dc/dc1/svc/w%65b", "percent-encoded"},
		{"no path", "spiffe://td.trellis", "path"},
		{"trailing slash", "spiffe://td.trellis/ns/default/dc/dc1/svc/web/", "path"},
		{"extra segment", "spiffe://td.trellis/ns/default/dc/dc1/svc/web/more", "path"},
		{"short", "spiffe://td.trellis/ns/default/dc/dc1", "path"},
		{"wrong keyword", "spiffe://td.trellis/namespace/default/dc/dc1/svc/web", "path"},
		{"empty namespace", "spiffe://td.trellis/ns//dc/dc1/svc/web", "namespace is empty"},
		{"empty datacenter", "spiffe://td.trellis/ns/default/dc//svc/web", "datacenter is empty"},
		{"empty service", "spiffe://td.trellis/ns/default/dc/dc1/svc/", "service is empty"},
		{"upper-case service", "spiffe://td.trellis/ns/default/dc/dc1/svc/Web", "service \"Web\""},
		{"underscore", "spiffe://td.trellis/ns/default/dc/dc_1/svc/web", "datacenter \"dc_1\""},
		{"long label", "spiffe://td.trellis/ns/default/dc/dc1/svc/" + strings.Repeat("a", 64), "at most 63"},
		{"agent server", "spiffe://td.trellis/agent/server/dc/dc1/id/x", "path"},
		{"agent empty instance", "spiffe://td.trellis/agent/client/dc/dc1/id/", "instance is empty"},
		{"server empty id", "spiffe://td.trellis/server/dc/dc1/id/", "server is empty"},
		{"server upper-case id", "spiffe://td.trellis/server/dc/dc1/id/S-1", "server \"S-1\""},
		{"server without dc", "spiffe://td.trellis/server/id/s-1", "path"},
		{"server extra segment", "spiffe://td.trellis/server/dc/dc1/id/s-1/x", "path"},
		{"trust domain only", "spiffe://td.trellis/", "path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := ParseIDString(c.in)
			if err == nil {
				t.Fatalf("ParseIDString(%q) = %v, want an error", c.in, id)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %q does not say %q", err, c.says)
			}
		})
	}
	if _, err := ParseID(nil); err == nil {
		t.Fatal("ParseID(nil) succeeded")
	}
}

func TestNames(t *testing.T) {
	if got := TrustDomain("0B7C3F4E-1d2a-4c5b-9e8f-7a6b5c4d3e2f"); got != testTD {
		t.Errorf("TrustDomain = %q, want %q", got, testTD)
	}
	svc := ServiceID{TrustDomain: testTD, Namespace: "shop", Datacenter: "dc2", Service: "cart"}
	if got := svc.DNSName(); got != "cart.svc.shop.dc2.trellis" {
		t.Errorf("DNSName = %q", got)
	}
	if got := TrustDomainURI(testTD).String(); got != "spiffe://"+testTD {
		t.Errorf("TrustDomainURI = %q", got)
	}
}
