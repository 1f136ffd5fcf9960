package snapshot

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbproxy "trellis.dev/trellis/api/proxy/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

const td = "11111111-2222-3333-4444-555555555555.trellis"

var now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// material is a root and a leaf of service svc in namespace ns it signed.
type material struct {
	rootPEM, leafPEM, keyPEM []byte
	notAfter                 time.Time
}

func newMaterial(t *testing.T, ns, svc string) material {
	t.Helper()
	root, rootKey, err := ca.NewRoot(ca.RootOptions{TrustDomain: td, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := ca.ServiceID{TrustDomain: td, Namespace: ns, Datacenter: "dc1", Service: svc}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: svc},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(72 * time.Hour),
		URIs: []*url.URL{id.URI()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, key.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return material{rootPEM: ca.EncodeCerts(root), leafPEM: ca.EncodeCerts(leaf), keyPEM: keyPEM, notAfter: leaf.NotAfter}
}

func serviceRes(t *testing.T, ns, name, protocol string, meshed bool) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(&pbcatalog.Service{Protocol: protocol, Mesh: meshed})
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: catalog.ServiceID(ns, name), Data: data}
}

// instanceRes is an instance of svc at addr with one check its agent
// reported as status ("" : none reported).
func instanceRes(t *testing.T, ns, name, svc, addr string, proxyPort uint32, status string) *pbresource.Resource {
	t.Helper()
	si := &pbcatalog.ServiceInstance{Service: svc, Address: addr, Port: 8080, Instance: "i-2", Task: name,
		Checks: []*pbcatalog.CheckDefinition{{Name: name}}}
	if proxyPort != 0 {
		si.Proxy = &pbcatalog.Proxy{Port: proxyPort, Mode: catalog.ProxyModeLocal}
	}
	data, err := anypb.New(si)
	if err != nil {
		t.Fatal(err)
	}
	r := &pbresource.Resource{Id: catalog.ServiceInstanceID(ns, name), Data: data}
	if status != "" {
		cs, err := anypb.New(&pbcatalog.ChecksStatus{ReportedAt: timestamppb.New(now),
			Checks: []*pbcatalog.CheckStatus{{Name: name, Status: status}}})
		if err != nil {
			t.Fatal(err)
		}
		r.Status = map[string]*pbresource.Status{catalog.AgentChecksStatusKey: {Data: cs}}
	}
	return r
}

func baseInputs(t *testing.T, m material) Inputs {
	return Inputs{
		Task: orchestrator.TaskID("prod", "dash-1"),
		Definition: &pborch.TaskDefinition{Family: "dashboard", Mesh: &pborch.TaskMesh{
			Port: 9002, Upstreams: []*pborch.MeshUpstream{{Service: "counting", LocalPort: 5000}},
		}},
		Instance: "i-1", Datacenter: "dc1", TrustDomain: td,
		Leaf:       Leaf{CertPEM: m.leafPEM, KeyPEM: m.keyPEM},
		Roots:      [][]byte{m.rootPEM},
		MeshConfig: &pbmesh.MeshConfig{DefaultIntention: "deny"},
		Services: []*pbresource.Resource{
			serviceRes(t, "prod", "dashboard", "http", true),
			serviceRes(t, "prod", "counting", "tcp", true),
		},
		Instances: []*pbresource.Resource{
			instanceRes(t, "prod", "counting-2", "counting", "10.0.0.2", 15000, catalog.CheckPassing),
			instanceRes(t, "prod", "counting-1", "counting", "10.0.0.1", 15000, catalog.CheckWarning),
		},
	}
}

func TestCompute(t *testing.T) {
	m := newMaterial(t, "prod", "dashboard")
	spiffe := func(ns, svc string) string {
		return ca.ServiceID{TrustDomain: td, Namespace: ns, Datacenter: "dc1", Service: svc}.String()
	}
	ep := func(name, ip string) *pbproxy.Endpoint {
		return &pbproxy.Endpoint{Instance: name, Address: ip + ":15000", AppAddress: ip + ":8080"}
	}
	for _, tc := range []struct {
		name  string
		edit  func(in *Inputs)
		check func(t *testing.T, s *pbproxy.Snapshot)
		err   string
	}{
		{
			name: "identity, certificates, inbound and the explicit upstream",
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				want := &pbproxy.Identity{Namespace: "prod", Service: "dashboard", Datacenter: "dc1", TrustDomain: td,
					SpiffeId: spiffe("prod", "dashboard"), Task: "dash-1", Instance: "i-1"}
				if !proto.Equal(s.GetIdentity(), want) {
					t.Errorf("identity %v, want %v", s.GetIdentity(), want)
				}
				c := s.GetCertificates()
				if string(c.GetLeafPem()) != string(m.leafPEM) || string(c.GetKeyPem()) != string(m.keyPEM) ||
					len(c.GetRootsPem()) != 1 || c.GetLeafExpires() != m.notAfter.Unix() {
					t.Errorf("certificates %v", c)
				}
				in := &pbproxy.Inbound{Address: "0.0.0.0:15000", AppAddress: "127.0.0.1:9002", Protocol: "http", DefaultIntention: "deny"}
				if !proto.Equal(s.GetInbound(), in) {
					t.Errorf("inbound %v, want %v", s.GetInbound(), in)
				}
				up := &pbproxy.Upstream{Namespace: "prod", Service: "counting", BindAddress: "127.0.0.1:5000", Protocol: "tcp",
					SpiffeId: spiffe("prod", "counting"), LoadBalancer: RoundRobin, ConnectTimeoutMs: 5000, IdleTimeoutMs: 3600000,
					Endpoints: []*pbproxy.Endpoint{ep("counting-1", "10.0.0.1"), ep("counting-2", "10.0.0.2")}}
				if len(s.GetUpstreams()) != 1 || !proto.Equal(s.GetUpstreams()[0], up) {
					t.Errorf("upstreams %v, want [%v]", s.GetUpstreams(), up)
				}
				if s.GetOutbound() != nil || s.GetAdminAddress() != AdminAddress || s.GetVersion() == "" {
					t.Errorf("outbound %v, admin %q, version %q", s.GetOutbound(), s.GetAdminAddress(), s.GetVersion())
				}
			},
		},
		{
			name: "critical, unreported and proxyless instances are no endpoints; other services' are ignored",
			edit: func(in *Inputs) {
				in.Instances = append(in.Instances,
					instanceRes(t, "prod", "counting-3", "counting", "10.0.0.3", 15000, catalog.CheckCritical),
					instanceRes(t, "prod", "counting-4", "counting", "10.0.0.4", 15000, ""),
					instanceRes(t, "prod", "counting-5", "counting", "10.0.0.5", 0, catalog.CheckPassing),
					instanceRes(t, "prod", "other-1", "other", "10.0.0.6", 15000, catalog.CheckPassing),
					instanceRes(t, "staging", "counting-1", "counting", "10.0.0.7", 15000, catalog.CheckPassing))
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				var names []string
				for _, e := range s.GetUpstreams()[0].GetEndpoints() {
					names = append(names, e.GetInstance())
				}
				if strings.Join(names, ",") != "counting-1,counting-2" {
					t.Errorf("endpoints %v", names)
				}
			},
		},
		{
			name: "an upstream in another namespace, an http upstream: least request",
			edit: func(in *Inputs) {
				in.Definition.Mesh.Upstreams = []*pborch.MeshUpstream{{Service: "api", Namespace: "staging", LocalPort: 6000}}
				in.Services = append(in.Services, serviceRes(t, "staging", "api", "grpc", true))
				in.Instances = append(in.Instances, instanceRes(t, "staging", "api-1", "api", "10.0.1.1", 15000, catalog.CheckPassing))
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				u := s.GetUpstreams()[0]
				if u.GetNamespace() != "staging" || u.GetProtocol() != "grpc" || u.GetLoadBalancer() != LeastRequest ||
					u.GetSpiffeId() != spiffe("staging", "api") || len(u.GetEndpoints()) != 1 || u.GetEndpoints()[0].GetInstance() != "api-1" {
					t.Errorf("upstream %v", u)
				}
			},
		},
		{
			name: "an upstream without a Service is tcp and has no endpoints",
			edit: func(in *Inputs) {
				in.Definition.Mesh.Upstreams = []*pborch.MeshUpstream{{Service: "gone", LocalPort: 6000}}
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				u := s.GetUpstreams()[0]
				if u.GetProtocol() != "tcp" || u.GetLoadBalancer() != RoundRobin || len(u.GetEndpoints()) != 0 {
					t.Errorf("upstream %v", u)
				}
			},
		},
		{
			name: "without its Service, the inbound speaks the mesh block's protocol; the mesh block's service names it",
			edit: func(in *Inputs) {
				in.Definition.Mesh.Service, in.Definition.Mesh.Protocol = "dashboard", "grpc"
				in.Definition.Family = "dash-family"
				in.Services = in.Services[1:]
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				if s.GetInbound().GetProtocol() != "grpc" || s.GetIdentity().GetService() != "dashboard" {
					t.Errorf("inbound %v, identity %v", s.GetInbound(), s.GetIdentity())
				}
			},
		},
		{
			name: "the destination's intentions and the default action",
			edit: func(in *Inputs) {
				in.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Namespace: "prod", Action: "allow"}}}
				in.MeshConfig = &pbmesh.MeshConfig{DefaultIntention: "allow"}
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				if len(s.GetInbound().GetIntentions().GetSources()) != 1 || s.GetInbound().GetDefaultIntention() != "allow" {
					t.Errorf("inbound %v", s.GetInbound())
				}
			},
		},
		{
			name: "no MeshConfig: deny by default",
			edit: func(in *Inputs) { in.MeshConfig = nil },
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				if s.GetInbound().GetDefaultIntention() != "deny" {
					t.Errorf("default %q", s.GetInbound().GetDefaultIntention())
				}
			},
		},
		{
			name: "transparent: every mesh service, ordered, on the default port, unknown passed through",
			edit: func(in *Inputs) {
				in.Definition.Mesh.Transparent = true
				in.Services = append(in.Services, serviceRes(t, "prod", "legacy", "tcp", false), serviceRes(t, "alpha", "zeta", "http", true))
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				o := s.GetOutbound()
				var names []string
				for _, d := range o.GetDestinations() {
					names = append(names, d.GetNamespace()+"/"+d.GetService())
					if d.GetBindAddress() != "" {
						t.Errorf("destination %s has a bind address", d.GetService())
					}
				}
				if o.GetAddress() != "127.0.0.1:15001" || o.GetUnknown() != UnknownPassthrough ||
					strings.Join(names, ",") != "alpha/zeta,prod/counting,prod/dashboard" {
					t.Errorf("outbound %v (%v)", o, names)
				}
				if len(o.GetDestinations()[1].GetEndpoints()) != 2 {
					t.Errorf("counting's endpoints %v", o.GetDestinations()[1].GetEndpoints())
				}
			},
		},
		{
			name: "transparent with mesh destinations only, on another port",
			edit: func(in *Inputs) {
				in.Definition.Mesh.Transparent = true
				in.MeshConfig.TransparentProxy = &pbmesh.TransparentProxyDefaults{OutboundPort: 16001, MeshDestinationsOnly: true}
			},
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				if o := s.GetOutbound(); o.GetAddress() != "127.0.0.1:16001" || o.GetUnknown() != UnknownDeny {
					t.Errorf("outbound %v", o)
				}
			},
		},
		{
			name: "roots are deduplicated",
			edit: func(in *Inputs) { in.Roots = [][]byte{m.rootPEM, m.rootPEM} },
			check: func(t *testing.T, s *pbproxy.Snapshot) {
				if len(s.GetCertificates().GetRootsPem()) != 1 {
					t.Errorf("roots %d", len(s.GetCertificates().GetRootsPem()))
				}
			},
		},
		{name: "no mesh block", edit: func(in *Inputs) { in.Definition.Mesh = nil }, err: "definition: task dash-1 has no mesh block"},
		{name: "no task id", edit: func(in *Inputs) { in.Task = nil }, err: "task: no id"},
		{name: "no port", edit: func(in *Inputs) { in.Definition.Mesh.Port = 0 }, err: "definition.mesh.port"},
		{name: "no instance", edit: func(in *Inputs) { in.Instance = "" }, err: "instance: empty"},
		{name: "no datacenter", edit: func(in *Inputs) { in.Datacenter = "" }, err: "datacenter: empty"},
		{name: "bad trust domain", edit: func(in *Inputs) { in.TrustDomain = "Not A Domain" }, err: "trust domain:"},
		{name: "no leaf", edit: func(in *Inputs) { in.Leaf.CertPEM = nil }, err: "leaf: no certificate"},
		{name: "no key", edit: func(in *Inputs) { in.Leaf.KeyPEM = nil }, err: "leaf: no key"},
		{name: "garbage leaf", edit: func(in *Inputs) { in.Leaf.CertPEM = []byte("nope") }, err: "leaf: certificate:"},
		{
			name: "another service's leaf", err: "leaf: it is not spiffe://" + td + "/ns/prod/dc/dc1/svc/dashboard's",
			edit: func(in *Inputs) {
				o := newMaterial(t, "prod", "web")
				in.Leaf = Leaf{CertPEM: o.leafPEM, KeyPEM: o.keyPEM}
			},
		},
		{
			name: "another leaf's key", err: "leaf: the key is not the certificate's",
			edit: func(in *Inputs) { in.Leaf.KeyPEM = newMaterial(t, "prod", "dashboard").keyPEM },
		},
		{name: "no roots", edit: func(in *Inputs) { in.Roots = nil }, err: "roots: none"},
		{name: "garbage root", edit: func(in *Inputs) { in.Roots = append(in.Roots, []byte("x")) }, err: "roots[1]:"},
		{
			name: "two upstreams on one port", err: "definition.mesh.upstreams[1].local_port: 5000 is prod/counting's already",
			edit: func(in *Inputs) {
				in.Definition.Mesh.Upstreams = append(in.Definition.Mesh.Upstreams, &pborch.MeshUpstream{Service: "api", LocalPort: 5000})
			},
		},
		{
			name: "an upstream without a service", err: "definition.mesh.upstreams[0].service: empty",
			edit: func(in *Inputs) { in.Definition.Mesh.Upstreams[0].Service = "" },
		},
		{
			name: "an upstream without a port", err: "definition.mesh.upstreams[0].local_port: 0 is not a port",
			edit: func(in *Inputs) { in.Definition.Mesh.Upstreams[0].LocalPort = 0 },
		},
		{
			name: "an instance that is not one", err: "instances[2]: dashboard is not a catalog ServiceInstance",
			edit: func(in *Inputs) { in.Instances = append(in.Instances, serviceRes(t, "prod", "dashboard", "tcp", true)) },
		},
		{
			name: "an instance whose data does not decode", err: "instances[0] (counting-2):",
			edit: func(in *Inputs) { in.Instances[0].Data = in.Services[0].Data },
		},
		{
			name: "a service that is not one", err: "services[2]: counting-2 is not a catalog Service",
			edit: func(in *Inputs) { in.Services = append(in.Services, in.Instances[0]) },
		},
		{
			name: "intentions that do not compile", err: "intentions of prod/dashboard:",
			edit: func(in *Inputs) {
				in.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "maybe"}}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInputs(t, m)
			if tc.edit != nil {
				tc.edit(&in)
			}
			s, err := Compute(in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				if s != nil {
					t.Errorf("a snapshot with the error: %v", s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

// The version names the content: the same inputs in another order give
// the same version; any change gives another.
func TestVersion(t *testing.T) {
	m := newMaterial(t, "prod", "dashboard")
	in := baseInputs(t, m)
	a, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Instances[0], in.Instances[1] = in.Instances[1], in.Instances[0]
	in.Services[0], in.Services[1] = in.Services[1], in.Services[0]
	b, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if a.GetVersion() != b.GetVersion() || !proto.Equal(a, b) {
		t.Errorf("the same inputs reordered: versions %s and %s", a.GetVersion(), b.GetVersion())
	}
	in.Instances = in.Instances[:1]
	c, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if c.GetVersion() == a.GetVersion() {
		t.Errorf("an endpoint fewer, the same version %s", c.GetVersion())
	}
	if v, err := Version(c); err != nil || v != c.GetVersion() {
		t.Errorf("Version(c) = %s, %v; c says %s", v, err, c.GetVersion())
	}
}
