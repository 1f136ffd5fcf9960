package snapshot

import (
	"cmp"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbproxy "trellis.dev/trellis/api/proxy/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// The proxy's fixed addresses and limits inside a task's namespace.
const (
	// AdminAddress is where the proxy's admin endpoint listens.
	AdminAddress = "127.0.0.1:19000"
	// ConnectTimeout bounds a connection attempt to one endpoint.
	ConnectTimeout = 5 * time.Second
	// IdleTimeout closes an upstream connection idle that long.
	IdleTimeout = time.Hour
)

// Load balancers of an upstream.
const (
	RoundRobin   = "round_robin"
	LeastRequest = "least_request"
)

// What a transparent proxy does with a connection to no known service.
const (
	UnknownPassthrough = "passthrough"
	UnknownDeny        = "deny"
)

// Inputs is everything a task's snapshot is made of.
type Inputs struct {
	// Task is the task's id (its namespace in its tenancy); Definition
	// its definition, which has a mesh block.
	Task       *pbresource.ID
	Definition *pborch.TaskDefinition
	// Instance, Datacenter and TrustDomain: where the task runs and the
	// identity its leaf carries.
	Instance, Datacenter, TrustDomain string
	// Leaf is the leaf of the task's service.
	Leaf Leaf
	// Roots are the trust domain's roots (active and not yet pruned), PEM
	// each.
	Roots [][]byte
	// MeshConfig is the mesh's configuration (nil: the defaults, but a
	// deny by default, as mesh.DefaultActionOf fails closed).
	MeshConfig *pbmesh.MeshConfig
	// Intentions are the intentions whose destination is the task's
	// service (nil: none).
	Intentions *pbmesh.Intentions
	// Services are the stored catalog/v1/Service resources of the task's
	// own service, of its upstreams and, for a transparent task, of every
	// service it may reach.
	Services []*pbresource.Resource
	// Instances are the stored catalog/v1/ServiceInstance resources of
	// those services, their statuses included (others are ignored).
	Instances []*pbresource.Resource
}

// Leaf is a leaf certificate as the proxy gets it.
type Leaf struct {
	// CertPEM is the leaf followed by its intermediates; KeyPEM its
	// private key. Its expiry is the leaf's NotAfter.
	CertPEM, KeyPEM []byte
}

// serviceRef is a service in a namespace.
type serviceRef struct{ namespace, name string }

func (s serviceRef) String() string { return s.namespace + "/" + s.name }

// Compute returns the snapshot of the task's proxy. An error names the
// input at fault; nothing is returned with it.
func Compute(in Inputs) (*pbproxy.Snapshot, error) {
	m := in.Definition.GetMesh()
	switch {
	case in.Task.GetName() == "":
		return nil, fmt.Errorf("task: no id")
	case m == nil:
		return nil, fmt.Errorf("definition: task %s has no mesh block", in.Task.GetName())
	case m.GetPort() == 0 || m.GetPort() > 65535:
		return nil, fmt.Errorf("definition.mesh.port: %d is not a port (1-65535)", m.GetPort())
	case in.Instance == "":
		return nil, fmt.Errorf("instance: empty")
	case in.Datacenter == "":
		return nil, fmt.Errorf("datacenter: empty")
	}
	if err := ca.CheckTrustDomain(in.TrustDomain); err != nil {
		return nil, fmt.Errorf("trust domain: %w", err)
	}
	if len(in.Roots) == 0 {
		return nil, fmt.Errorf("roots: none: the proxy could verify no peer")
	}
	for i, r := range in.Roots {
		if _, err := ca.ParseCerts(r); err != nil {
			return nil, fmt.Errorf("roots[%d]: %w", i, err)
		}
	}
	ns := namespaceOf(in.Task)
	self := serviceRef{ns, orchestrator.MeshService(in.Definition)}
	protocols, err := protocolsOf(in.Services)
	if err != nil {
		return nil, err
	}
	endpoints, err := endpointsOf(in.Instances)
	if err != nil {
		return nil, err
	}
	if in.Intentions != nil {
		if _, err := mesh.Compile(mesh.Service{Namespace: ns, Name: self.name}, in.Intentions); err != nil {
			return nil, fmt.Errorf("intentions of %s: %w", self, err)
		}
	}
	leaf, err := checkLeaf(in.Leaf, spiffeID(in, self))
	if err != nil {
		return nil, err
	}
	selfProtocol, ok := protocols[self]
	if !ok {
		selfProtocol = orchestrator.MeshProtocol(m)
	}
	snap := &pbproxy.Snapshot{
		Identity: &pbproxy.Identity{
			Namespace: ns, Service: self.name, Datacenter: in.Datacenter, TrustDomain: in.TrustDomain,
			SpiffeId: spiffeID(in, self),
			Task:     in.Task.GetName(), Instance: in.Instance,
		},
		Certificates: &pbproxy.Certificates{
			LeafPem: slices.Clone(in.Leaf.CertPEM), KeyPem: slices.Clone(in.Leaf.KeyPEM),
			RootsPem: sortedRoots(in.Roots), LeafExpires: leaf.NotAfter.Unix(),
		},
		Inbound: &pbproxy.Inbound{
			Address:          net.JoinHostPort("0.0.0.0", strconv.Itoa(orchestrator.ProxyInboundPort)),
			AppAddress:       net.JoinHostPort("127.0.0.1", strconv.Itoa(int(m.GetPort()))),
			Protocol:         selfProtocol,
			Intentions:       proto.CloneOf(in.Intentions),
			DefaultIntention: string(mesh.DefaultActionOf(in.MeshConfig)),
		},
		AdminAddress: AdminAddress,
	}
	seen := map[uint32]string{}
	for i, u := range m.GetUpstreams() {
		ref := serviceRef{cmp.Or(u.GetNamespace(), ns), u.GetService()}
		if ref.name == "" {
			return nil, fmt.Errorf("definition.mesh.upstreams[%d].service: empty", i)
		}
		p := u.GetLocalPort()
		if p == 0 || p > 65535 {
			return nil, fmt.Errorf("definition.mesh.upstreams[%d].local_port: %d is not a port (1-65535)", i, p)
		}
		if other, dup := seen[p]; dup {
			return nil, fmt.Errorf("definition.mesh.upstreams[%d].local_port: %d is %s's already", i, p, other)
		}
		seen[p] = ref.String()
		up := upstream(in, ref, protocols, endpoints)
		up.BindAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p)))
		snap.Upstreams = append(snap.Upstreams, up)
	}
	if m.GetTransparent() {
		snap.Outbound = outbound(in, protocols, endpoints)
	}
	v, err := Version(snap)
	if err != nil {
		return nil, err
	}
	snap.Version = v
	return snap, nil
}

// Version is the version of snap's content (its version field aside): a
// hash of its deterministic encoding.
func Version(snap *pbproxy.Snapshot) (string, error) {
	c := proto.CloneOf(snap)
	c.Version = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode the snapshot: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), nil
}

// checkLeaf parses the leaf and refuses one that is not of the task's
// service (id, its SPIFFE id) or whose key is not its own.
func checkLeaf(l Leaf, id string) (*x509.Certificate, error) {
	switch {
	case len(l.CertPEM) == 0:
		return nil, fmt.Errorf("leaf: no certificate")
	case len(l.KeyPEM) == 0:
		return nil, fmt.Errorf("leaf: no key")
	}
	certs, err := ca.ParseCerts(l.CertPEM)
	if err != nil {
		return nil, fmt.Errorf("leaf: certificate: %w", err)
	}
	key, err := ca.ParseKey(l.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("leaf: key: %w", err)
	}
	leaf := certs[0]
	if !slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == id }) {
		return nil, fmt.Errorf("leaf: it is not %s's (its URI SANs: %v)", id, leaf.URIs)
	}
	if !publicKeyEqual(key.Public(), leaf.PublicKey) {
		return nil, fmt.Errorf("leaf: the key is not the certificate's")
	}
	return leaf, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// upstream is service ref as the task's proxy reaches it.
func upstream(in Inputs, ref serviceRef, protocols map[serviceRef]string, endpoints map[serviceRef][]*pbproxy.Endpoint) *pbproxy.Upstream {
	p, ok := protocols[ref]
	if !ok {
		p = catalog.ProtocolTCP
	}
	lb := RoundRobin
	if mesh.SpeaksHTTP(p) {
		lb = LeastRequest
	}
	var eps []*pbproxy.Endpoint
	for _, e := range endpoints[ref] {
		eps = append(eps, proto.CloneOf(e))
	}
	return &pbproxy.Upstream{
		Namespace: ref.namespace, Service: ref.name, Protocol: p,
		SpiffeId:         spiffeID(in, ref),
		Endpoints:        eps,
		LoadBalancer:     lb,
		ConnectTimeoutMs: uint32(ConnectTimeout.Milliseconds()),
		IdleTimeoutMs:    uint32(IdleTimeout.Milliseconds()),
	}
}

// outbound is the transparent table: every mesh service given, in order.
func outbound(in Inputs, protocols map[serviceRef]string, endpoints map[serviceRef][]*pbproxy.Endpoint) *pbproxy.TransparentOutbound {
	port := in.MeshConfig.GetTransparentProxy().GetOutboundPort()
	if port == 0 {
		port = mesh.DefaultOutboundPort
	}
	unknown := UnknownPassthrough
	if in.MeshConfig.GetTransparentProxy().GetMeshDestinationsOnly() {
		unknown = UnknownDeny
	}
	out := &pbproxy.TransparentOutbound{
		Address: net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))),
		Unknown: unknown,
	}
	var refs []serviceRef
	for _, s := range in.Services {
		svc, err := resource.DecodeData[*pbcatalog.Service](s)
		if err != nil || !svc.GetMesh() {
			continue
		}
		refs = append(refs, refOf(s.GetId()))
	}
	slices.SortFunc(refs, compareRefs)
	refs = slices.Compact(refs)
	for _, ref := range refs {
		out.Destinations = append(out.Destinations, upstream(in, ref, protocols, endpoints))
	}
	return out
}

func compareRefs(a, b serviceRef) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}

// protocolsOf maps each Service given onto its protocol.
func protocolsOf(services []*pbresource.Resource) (map[serviceRef]string, error) {
	out := make(map[serviceRef]string, len(services))
	for i, s := range services {
		if !ids.SameType(s.GetId().GetType(), catalog.ServiceType) {
			return nil, fmt.Errorf("services[%d]: %s is not a catalog Service", i, s.GetId().GetName())
		}
		svc, err := resource.DecodeData[*pbcatalog.Service](s)
		if err != nil {
			return nil, fmt.Errorf("services[%d] (%s): %w", i, s.GetId().GetName(), err)
		}
		out[refOf(s.GetId())] = cmp.Or(svc.GetProtocol(), catalog.ProtocolTCP)
	}
	return out, nil
}

// endpointsOf files the healthy mesh instances given under their
// service, each list ordered by instance name.
func endpointsOf(instances []*pbresource.Resource) (map[serviceRef][]*pbproxy.Endpoint, error) {
	out := map[serviceRef][]*pbproxy.Endpoint{}
	for i, r := range instances {
		if !ids.SameType(r.GetId().GetType(), catalog.ServiceInstanceType) {
			return nil, fmt.Errorf("instances[%d]: %s is not a catalog ServiceInstance", i, r.GetId().GetName())
		}
		si, err := resource.DecodeData[*pbcatalog.ServiceInstance](r)
		if err != nil {
			return nil, fmt.Errorf("instances[%d] (%s): %w", i, r.GetId().GetName(), err)
		}
		if si.GetProxy().GetPort() == 0 || si.GetAddress() == "" {
			continue // not in the mesh
		}
		if h := catalog.HealthOf(r); h == nil || h.GetHealth() == catalog.CheckCritical {
			continue
		}
		ref := serviceRef{namespaceOf(r.GetId()), si.GetService()}
		out[ref] = append(out[ref], &pbproxy.Endpoint{
			Instance:   r.GetId().GetName(),
			Address:    net.JoinHostPort(si.GetAddress(), strconv.Itoa(int(si.GetProxy().GetPort()))),
			AppAddress: net.JoinHostPort(si.GetAddress(), strconv.Itoa(int(si.GetPort()))),
		})
	}
	for _, eps := range out {
		slices.SortFunc(eps, func(a, b *pbproxy.Endpoint) int {
			return cmp.Or(cmp.Compare(a.GetInstance(), b.GetInstance()), cmp.Compare(a.GetAddress(), b.GetAddress()))
		})
	}
	return out, nil
}

func sortedRoots(roots [][]byte) [][]byte {
	out := make([][]byte, 0, len(roots))
	for _, r := range roots {
		out = append(out, slices.Clone(r))
	}
	slices.SortFunc(out, func(a, b []byte) int { return cmp.Compare(string(a), string(b)) })
	return slices.CompactFunc(out, func(a, b []byte) bool { return string(a) == string(b) })
}

func spiffeID(in Inputs, ref serviceRef) string {
	return ca.ServiceID{TrustDomain: in.TrustDomain, Namespace: ref.namespace, Datacenter: in.Datacenter, Service: ref.name}.String()
}

func refOf(id *pbresource.ID) serviceRef { return serviceRef{namespaceOf(id), id.GetName()} }

func namespaceOf(id *pbresource.ID) string {
	return cmp.Or(id.GetTenancy().GetNamespace(), resource.DefaultNamespace)
}
