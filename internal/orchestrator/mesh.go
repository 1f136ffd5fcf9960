package orchestrator

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/resource"
)

// A task definition's mesh block (TaskMesh) says which catalog service its
// tasks are instances of, the app's port, and the upstreams the app calls
// through its sidecar proxy. This file holds its defaults and its checks;
// the agent's mesh-init acts on it.

// Protocols of a mesh service: what its proxy speaks to it, and so
// whether intentions may look inside requests (http, grpc).
const (
	MeshProtocolTCP  = "tcp"
	MeshProtocolHTTP = "http"
	MeshProtocolGRPC = "grpc"
)

// MeshProtocols are the protocols a mesh block may name, the default
// first.
var MeshProtocols = []string{MeshProtocolTCP, MeshProtocolHTTP, MeshProtocolGRPC}

// The sidecar proxy's own ports inside a mesh task (seed 004's, and
// DESIGN.md's "How a mesh task's traffic is configured"): inbound mTLS on
// ProxyInboundPort, redirected outbound traffic on ProxyOutboundPort. They
// equal internal/redirect's defaults (a test holds them equal); an app, an
// upstream's local port or a container cannot use them.
const (
	ProxyInboundPort  = 15000
	ProxyOutboundPort = 15001
	// ProxyAdminPort is the proxy's admin port (/ready, /stats, /config),
	// which the agent's health check of the proxy probes.
	ProxyAdminPort = 19000
)

// ProxyContainer is the name of the sidecar proxy's container, which the
// agent adds to every task of a definition with a mesh block.
const ProxyContainer = "trellis-proxy"

// proxyPorts names each port the proxy takes, for refusals.
var proxyPorts = map[uint32]string{
	ProxyInboundPort:  "the proxy's inbound port",
	ProxyOutboundPort: "the proxy's transparent outbound port",
	ProxyAdminPort:    "the proxy's admin port",
}

// Limits of a mesh block: Consul's for meta (64 pairs, keys of 128
// characters, values of 512), and as many tags as anyone filters by.
const (
	MaxMeshUpstreams = 64
	MaxMeshTags      = 32
	MaxMeshTagLength = 63
	MaxMeshMeta      = 64
	MaxMeshMetaKey   = 128
	MaxMeshMetaValue = 512
	// MeshMetaReservedPrefix begins the meta keys Trellis sets itself on a
	// service instance (as Consul reserves "consul-").
	MeshMetaReservedPrefix = "trellis-"
)

var metaKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// MeshService is the catalog service a definition's tasks are instances
// of: the mesh block's service, or the family when it names none; "" for
// a definition without a mesh block.
func MeshService(td *pborch.TaskDefinition) string {
	m := td.GetMesh()
	switch {
	case m == nil:
		return ""
	case m.GetService() != "":
		return m.GetService()
	}
	return td.GetFamily()
}

// MeshProtocol is a mesh block's protocol: MeshProtocolTCP when it names
// none.
func MeshProtocol(m *pborch.TaskMesh) string {
	if m.GetProtocol() == "" {
		return MeshProtocolTCP
	}
	return m.GetProtocol()
}

// mutateMesh fills a mesh block's defaults, so that what is stored says
// what mesh-init registers: the service (the family) and the protocol
// (tcp).
func mutateMesh(td *pborch.TaskDefinition) {
	m := td.GetMesh()
	if m == nil {
		return
	}
	if m.Service == "" {
		m.Service = td.GetFamily()
	}
	if m.Protocol == "" {
		m.Protocol = MeshProtocolTCP
	}
}

// validateMesh checks a task definition's mesh block; fields are named
// from "data.". The containers and network are checked first, so the
// ports the task listens on are known to be sound.
func validateMesh(td *pborch.TaskDefinition) error {
	m := td.GetMesh()
	if m == nil {
		return nil
	}
	const field = "data.mesh"
	for i, c := range td.GetContainers() {
		if c.GetName() == ProxyContainer {
			return resource.NewFieldError(fmt.Sprintf("data.containers[%d].name", i), "%q is the name of the sidecar proxy the agent adds to a mesh task: name the container otherwise", ProxyContainer)
		}
	}
	if m.GetService() != "" {
		if err := resource.ValidateName(field+".service", m.GetService()); err != nil {
			return err
		}
	}
	taken := taskListenPorts(td)
	port := m.GetPort()
	switch {
	case port == 0:
		return resource.NewFieldError(field+".port", "is required: the port the app listens on inside the task, 1 to 65535")
	case port > 65535:
		return resource.NewFieldError(field+".port", "%d is not a port: 1 to 65535", port)
	case proxyPorts[port] != "":
		return resource.NewFieldError(field+".port", "%d is %s: the app must listen on another port", port, proxyPorts[port])
	}
	for _, p := range slices.Sorted(maps.Keys(taken)) {
		if proxyPorts[p] != "" {
			return resource.NewFieldError("data."+taken[p], "%d is %s in a mesh task: the app must listen on another port", p, proxyPorts[p])
		}
	}
	switch p := m.GetProtocol(); p {
	case "", MeshProtocolTCP, MeshProtocolHTTP, MeshProtocolGRPC:
	default:
		return resource.NewFieldError(field+".protocol", "%q is not a protocol: one of %s (the default)", p, strings.Join(MeshProtocols, ", "))
	}
	if m.GetTransparent() && NetworkMode(td) != NetworkBridge {
		return resource.NewFieldError(field+".transparent", "needs network %q: the redirect rules are written in the task's own network namespace, and a %s task shares the instance's", NetworkBridge, NetworkMode(td))
	}
	if err := validateUpstreams(field, m, taken); err != nil {
		return err
	}
	if err := validateMeshTags(field+".tags", m.GetTags()); err != nil {
		return err
	}
	return validateMeshMeta(field+".meta", m.GetMeta())
}

func validateUpstreams(field string, m *pborch.TaskMesh, taken map[uint32]string) error {
	ups := m.GetUpstreams()
	if len(ups) > MaxMeshUpstreams {
		return resource.NewFieldError(field+".upstreams", "has %d upstreams, over the limit of %d", len(ups), MaxMeshUpstreams)
	}
	ports := make(map[uint32]int, len(ups))
	dests := make(map[string]int, len(ups))
	for i, u := range ups {
		f := fmt.Sprintf("%s.upstreams[%d]", field, i)
		if err := resource.ValidateName(f+".service", u.GetService()); err != nil {
			return err
		}
		if u.GetNamespace() != "" {
			if err := resource.ValidateName(f+".namespace", u.GetNamespace()); err != nil {
				return err
			}
		}
		dest := u.GetNamespace() + "/" + u.GetService()
		if j, dup := dests[dest]; dup {
			return resource.NewFieldError(f+".service", "%q is also upstreams[%d]: list an upstream once", u.GetService(), j)
		}
		dests[dest] = i
		lp := u.GetLocalPort()
		switch {
		case lp == 0:
			return resource.NewFieldError(f+".local_port", "is required: the port on 127.0.0.1 where the app reaches %s, 1 to 65535", u.GetService())
		case lp > 65535:
			return resource.NewFieldError(f+".local_port", "%d is not a port: 1 to 65535", lp)
		case lp == m.GetPort():
			return resource.NewFieldError(f+".local_port", "%d is the app's port (mesh.port): the proxy cannot listen where the app does", lp)
		case proxyPorts[lp] != "":
			return resource.NewFieldError(f+".local_port", "%d is %s: pick another port", lp, proxyPorts[lp])
		case taken[lp] != "":
			return resource.NewFieldError(f+".local_port", "%d is %s, where a container listens: pick another port", lp, taken[lp])
		}
		if j, dup := ports[lp]; dup {
			return resource.NewFieldError(f+".local_port", "%d is also the local port of upstreams[%d]: each upstream needs its own", lp, j)
		}
		ports[lp] = i
	}
	return nil
}

func validateMeshTags(field string, tags []string) error {
	if len(tags) > MaxMeshTags {
		return resource.NewFieldError(field, "has %d tags, over the limit of %d", len(tags), MaxMeshTags)
	}
	seen := make(map[string]int, len(tags))
	for i, tag := range tags {
		f := fmt.Sprintf("%s[%d]", field, i)
		// A tag filters DNS answers (<tag>.<service>.service...), so it
		// is a DNS label.
		if !resource.IsDNSLabel(tag) || len(tag) > MaxMeshTagLength {
			return resource.NewFieldError(f, "%q is not a tag: a lowercase DNS label (a-z, 0-9, '-', at most %d characters), as DNS queries filter by it", tag, MaxMeshTagLength)
		}
		if j, dup := seen[tag]; dup {
			return resource.NewFieldError(f, "%q is also tags[%d]", tag, j)
		}
		seen[tag] = i
	}
	return nil
}

func validateMeshMeta(field string, meta map[string]string) error {
	if len(meta) > MaxMeshMeta {
		return resource.NewFieldError(field, "has %d entries, over the limit of %d", len(meta), MaxMeshMeta)
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		f := metaField(field, k)
		switch {
		case !metaKey.MatchString(k):
			return resource.NewFieldError(f, "%q is not a meta key: letters, digits, '_' and '-'", k)
		case len(k) > MaxMeshMetaKey:
			return resource.NewFieldError(f, "the key is %d characters long, over the limit of %d", len(k), MaxMeshMetaKey)
		case strings.HasPrefix(strings.ToLower(k), MeshMetaReservedPrefix):
			return resource.NewFieldError(f, "keys beginning %q are set by Trellis", MeshMetaReservedPrefix)
		case len(meta[k]) > MaxMeshMetaValue:
			return resource.NewFieldError(f, "the value is %d characters long, over the limit of %d", len(meta[k]), MaxMeshMetaValue)
		}
	}
	return nil
}

// metaField names a meta entry as spec files spell it: meta.team, or
// meta["a key"] for a key that is not a plain word.
func metaField(field, key string) string {
	if metaKey.MatchString(key) {
		return field + "." + key
	}
	return fmt.Sprintf("%s[%q]", field, key)
}

// taskListenPorts are the ports a task's containers listen on inside the
// task, each named as its definition spells it: a bridge task's published
// container ports, a host task's containers' ports.
func taskListenPorts(td *pborch.TaskDefinition) map[uint32]string {
	out := make(map[uint32]string)
	if NetworkMode(td) == NetworkBridge {
		for i, p := range td.GetPorts() {
			if PortProtocol(p) == ProtocolTCP {
				out[p.GetContainerPort()] = fmt.Sprintf("ports[%d].container_port", i)
			}
		}
		return out
	}
	for i, c := range td.GetContainers() {
		for k, p := range c.GetPorts() {
			out[p] = fmt.Sprintf("containers[%d].ports[%d]", i, k)
		}
	}
	return out
}
