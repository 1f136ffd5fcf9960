package orchestrator_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/redirect"
)

// meshDefinition is the example: web, a bridge task whose app
// listens on 8080, calling api on 127.0.0.1:9191, transparently.
func meshDefinition() *pborch.TaskDefinition {
	td := bridgeDefinition()
	td.Mesh = &pborch.TaskMesh{
		Service: "web", Port: 8080, Protocol: "http",
		Upstreams:   []*pborch.MeshUpstream{{Service: "api", LocalPort: 9191}},
		Transparent: true,
		Tags:        []string{"v1"},
		Meta:        map[string]string{"team": "payments"},
	}
	return td
}

// The proxy's ports a mesh block keeps free are the ones the redirect
// rules send traffic to.
func TestProxyPortsAreTheRedirects(t *testing.T) {
	if orchestrator.ProxyInboundPort != redirect.DefaultProxyInboundPort || orchestrator.ProxyOutboundPort != redirect.DefaultProxyOutboundPort {
		t.Fatalf("proxy ports %d/%d, redirect's %d/%d", orchestrator.ProxyInboundPort, orchestrator.ProxyOutboundPort,
			redirect.DefaultProxyInboundPort, redirect.DefaultProxyOutboundPort)
	}
}

func TestMeshAccepted(t *testing.T) {
	for name, edit := range map[string]func(td *pborch.TaskDefinition){
		"the issue's example": func(*pborch.TaskDefinition) {},
		"only a port":         func(td *pborch.TaskDefinition) { td.Mesh = &pborch.TaskMesh{Port: 8080} },
		"host network, not transparent": func(td *pborch.TaskDefinition) {
			td.Network, td.Ports, td.Mesh.Transparent = "", nil, false
			td.Containers[0].Ports = []uint32{8080}
		},
		"grpc":                  func(td *pborch.TaskDefinition) { td.Mesh.Protocol = "grpc" },
		"an upstream elsewhere": func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].Namespace = "payments" },
		"one service in two namespaces": func(td *pborch.TaskDefinition) {
			td.Mesh.Upstreams = append(td.Mesh.Upstreams, &pborch.MeshUpstream{Service: "api", Namespace: "staging", LocalPort: 9192})
		},
		"a udp port shares a local port's number": func(td *pborch.TaskDefinition) {
			td.Ports = append(td.Ports, &pborch.PortMapping{Name: "dns", ContainerPort: 9191, Protocol: "udp"})
		},
		"the most tags and meta": func(td *pborch.TaskDefinition) {
			td.Mesh.Tags, td.Mesh.Meta = nil, map[string]string{}
			for i := range orchestrator.MaxMeshTags {
				td.Mesh.Tags = append(td.Mesh.Tags, fmt.Sprintf("t%d", i))
			}
			for i := range orchestrator.MaxMeshMeta {
				td.Mesh.Meta[fmt.Sprintf("k%d", i)] = strings.Repeat("v", orchestrator.MaxMeshMetaValue)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			td := meshDefinition()
			edit(td)
			if _, err := validated(t, td); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The Mutate hook stores what mesh-init will register: the service (the
// family by default) and the protocol (tcp by default).
func TestMeshDefaults(t *testing.T) {
	td := meshDefinition()
	td.Mesh.Service, td.Mesh.Protocol = "", ""
	stored, err := validated(t, td)
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.GetMesh(); got.GetService() != "web" || got.GetProtocol() != "tcp" {
		t.Fatalf("defaults: service %q, protocol %q", got.GetService(), got.GetProtocol())
	}
	if orchestrator.MeshService(stored) != "web" || orchestrator.MeshService(webDefinition()) != "" {
		t.Fatal("MeshService")
	}
	// Given values are kept, and a definition without a block gets none.
	stored, err = validated(t, meshDefinition())
	if err != nil || stored.GetMesh().GetService() != "web" || stored.GetMesh().GetProtocol() != "http" {
		t.Fatalf("given values: %v %v", stored.GetMesh(), err)
	}
	td = meshDefinition()
	td.Family, td.Mesh.Service = "frontend", ""
	if stored, _ = validated(t, td); stored.GetMesh().GetService() != "frontend" {
		t.Fatalf("service of family frontend: %q", stored.GetMesh().GetService())
	}
	if stored, _ = validated(t, webDefinition()); stored.Mesh != nil {
		t.Fatalf("a definition without a mesh block got %v", stored.Mesh)
	}
}

// Each refusal names its field (from "data.") and why.
func TestMeshRefusals(t *testing.T) {
	long := strings.Repeat("k", orchestrator.MaxMeshMetaKey+1)
	for _, c := range []struct {
		name string
		edit func(td *pborch.TaskDefinition)
		want string
	}{
		{"no port", func(td *pborch.TaskDefinition) { td.Mesh.Port = 0 },
			"data.mesh.port: is required: the port the app listens on inside the task, 1 to 65535"},
		{"a port past 65535", func(td *pborch.TaskDefinition) { td.Mesh.Port = 65536 },
			"data.mesh.port: 65536 is not a port: 1 to 65535"},
		{"the app on the proxy's inbound port", func(td *pborch.TaskDefinition) { td.Mesh.Port = 15000 },
			"data.mesh.port: 15000 is the proxy's inbound port: the app must listen on another port"},
		{"the app on the proxy's outbound port", func(td *pborch.TaskDefinition) { td.Mesh.Port = 15001 },
			"data.mesh.port: 15001 is the proxy's transparent outbound port: the app must listen on another port"},
		{"the app on the proxy's admin port", func(td *pborch.TaskDefinition) { td.Mesh.Port = 19000 },
			"data.mesh.port: 19000 is the proxy's admin port: the app must listen on another port"},
		{"a container named as the proxy", func(td *pborch.TaskDefinition) {
			td.Containers[1].Name, td.Containers[0].DependsOn = "trellis-proxy", nil
		},
			`data.containers[1].name: "trellis-proxy" is the name of the sidecar proxy the agent adds to a mesh task: name the container otherwise`},
		{"a container on the proxy's port, bridge", func(td *pborch.TaskDefinition) {
			td.Ports = append(td.Ports, &pborch.PortMapping{Name: "admin", ContainerPort: 15000})
		}, "data.ports[2].container_port: 15000 is the proxy's inbound port in a mesh task: the app must listen on another port"},
		{"a container on the proxy's port, host", func(td *pborch.TaskDefinition) {
			td.Network, td.Ports, td.Mesh.Transparent = "", nil, false
			td.Containers[1].Ports = []uint32{15001}
		}, "data.containers[1].ports[0]: 15001 is the proxy's transparent outbound port in a mesh task: the app must listen on another port"},
		{"a bad service", func(td *pborch.TaskDefinition) { td.Mesh.Service = "Web_1" },
			`data.mesh.service: "Web_1" is not a valid name`},
		{"a bad protocol", func(td *pborch.TaskDefinition) { td.Mesh.Protocol = "http2" },
			`data.mesh.protocol: "http2" is not a protocol: one of tcp, http, grpc (the default)`},
		{"transparent on the host's network", func(td *pborch.TaskDefinition) {
			td.Network, td.Ports = "host", nil
		}, `data.mesh.transparent: needs network "bridge": the redirect rules are written in the task's own network namespace, and a host task shares the instance's`},
		{"transparent with no network named", func(td *pborch.TaskDefinition) {
			td.Network, td.Ports = "", nil
		}, `data.mesh.transparent: needs network "bridge"`},
		{"an upstream without a service", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].Service = "" },
			"data.mesh.upstreams[0].service: is required"},
		{"an upstream's bad service", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].Service = "api.v1" },
			`data.mesh.upstreams[0].service: "api.v1" is not a valid name`},
		{"an upstream's bad namespace", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].Namespace = "Prod" },
			`data.mesh.upstreams[0].namespace: "Prod" is not a valid name`},
		{"an upstream twice", func(td *pborch.TaskDefinition) {
			td.Mesh.Upstreams = append(td.Mesh.Upstreams, &pborch.MeshUpstream{Service: "api", LocalPort: 9192})
		}, `data.mesh.upstreams[1].service: "api" is also upstreams[0]: list an upstream once`},
		{"no local port", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].LocalPort = 0 },
			"data.mesh.upstreams[0].local_port: is required: the port on 127.0.0.1 where the app reaches api, 1 to 65535"},
		{"a local port past 65535", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].LocalPort = 70000 },
			"data.mesh.upstreams[0].local_port: 70000 is not a port: 1 to 65535"},
		{"a local port on the app's", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].LocalPort = 8080 },
			"data.mesh.upstreams[0].local_port: 8080 is the app's port (mesh.port): the proxy cannot listen where the app does"},
		{"a local port on the proxy's inbound", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].LocalPort = 15000 },
			"data.mesh.upstreams[0].local_port: 15000 is the proxy's inbound port: pick another port"},
		{"a local port on the proxy's outbound", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].LocalPort = 15001 },
			"data.mesh.upstreams[0].local_port: 15001 is the proxy's transparent outbound port: pick another port"},
		{"a local port a bridge container listens on", func(td *pborch.TaskDefinition) { td.Mesh.Upstreams[0].LocalPort = 9100 },
			"data.mesh.upstreams[0].local_port: 9100 is ports[1].container_port, where a container listens: pick another port"},
		{"a local port a host container listens on", func(td *pborch.TaskDefinition) {
			td.Network, td.Ports, td.Mesh.Transparent = "", nil, false
			td.Containers[1].Ports = []uint32{9191}
		}, "data.mesh.upstreams[0].local_port: 9191 is containers[1].ports[0], where a container listens: pick another port"},
		{"two upstreams on one local port", func(td *pborch.TaskDefinition) {
			td.Mesh.Upstreams = append(td.Mesh.Upstreams, &pborch.MeshUpstream{Service: "db", LocalPort: 9191})
		}, "data.mesh.upstreams[1].local_port: 9191 is also the local port of upstreams[0]: each upstream needs its own"},
		{"too many upstreams", func(td *pborch.TaskDefinition) {
			td.Mesh.Upstreams = nil
			for i := range orchestrator.MaxMeshUpstreams + 1 {
				td.Mesh.Upstreams = append(td.Mesh.Upstreams, &pborch.MeshUpstream{Service: fmt.Sprintf("s%d", i), LocalPort: uint32(20000 + i)})
			}
		}, "data.mesh.upstreams: has 65 upstreams, over the limit of 64"},
		{"too many tags", func(td *pborch.TaskDefinition) {
			for i := range orchestrator.MaxMeshTags {
				td.Mesh.Tags = append(td.Mesh.Tags, fmt.Sprintf("t%d", i))
			}
		}, "data.mesh.tags: has 33 tags, over the limit of 32"},
		{"a bad tag", func(td *pborch.TaskDefinition) { td.Mesh.Tags = append(td.Mesh.Tags, "Canary Release") },
			`data.mesh.tags[1]: "Canary Release" is not a tag: a lowercase DNS label (a-z, 0-9, '-', at most 63 characters), as DNS queries filter by it`},
		{"an empty tag", func(td *pborch.TaskDefinition) { td.Mesh.Tags = []string{""} },
			`data.mesh.tags[0]: "" is not a tag`},
		{"a tag twice", func(td *pborch.TaskDefinition) { td.Mesh.Tags = append(td.Mesh.Tags, "v2", "v1") },
			`data.mesh.tags[2]: "v1" is also tags[0]`},
		{"too much meta", func(td *pborch.TaskDefinition) {
			for i := range orchestrator.MaxMeshMeta {
				td.Mesh.Meta[fmt.Sprintf("k%d", i)] = "v"
			}
		}, "data.mesh.meta: has 65 entries, over the limit of 64"},
		{"a meta key with a space", func(td *pborch.TaskDefinition) { td.Mesh.Meta["cost center"] = "7" },
			`data.mesh.meta["cost center"]: "cost center" is not a meta key: letters, digits, '_' and '-'`},
		{"a long meta key", func(td *pborch.TaskDefinition) { td.Mesh.Meta[long] = "x" },
			"data.mesh.meta." + long + ": the key is 129 characters long, over the limit of 128"},
		{"a reserved meta key", func(td *pborch.TaskDefinition) { td.Mesh.Meta["Trellis-task"] = "x" },
			`data.mesh.meta.Trellis-task: keys beginning "trellis-" are set by Trellis`},
		{"a long meta value", func(td *pborch.TaskDefinition) { td.Mesh.Meta["team"] = strings.Repeat("p", 513) },
			"data.mesh.meta.team: the value is 513 characters long, over the limit of 512"},
	} {
		t.Run(c.name, func(t *testing.T) {
			td := meshDefinition()
			c.edit(td)
			_, err := validated(t, td)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("got  %v\nwant %s", err, c.want)
			}
		})
	}
}

// A revision is immutable: the same family with a mesh block is another
// revision, and the block is part of what registration compares.
func TestMeshBlockIsPartOfTheDefinition(t *testing.T) {
	plain, err := validated(t, bridgeDefinition())
	if err != nil {
		t.Fatal(err)
	}
	meshed, err := validated(t, meshDefinition())
	if err != nil {
		t.Fatal(err)
	}
	if proto.Equal(plain, meshed) {
		t.Fatal("a mesh block changes nothing in the stored definition")
	}
}

// What a mesh block may say, mesh-init writes into the catalog: its
// protocols are the catalog's, its limits within the catalog's, and the
// most it accepts passes the catalog's own checks of tags and meta. (The
// catalog imports this package, so the two vocabularies are held equal
// here rather than shared.)
func TestMeshBlockFitsTheCatalog(t *testing.T) {
	if !slices.Equal(orchestrator.MeshProtocols, catalog.Protocols) {
		t.Fatalf("mesh block protocols %v, the catalog's %v", orchestrator.MeshProtocols, catalog.Protocols)
	}
	if orchestrator.MaxMeshTags > catalog.MaxTags || orchestrator.MaxMeshTagLength > catalog.MaxTagLength ||
		orchestrator.MaxMeshMeta > catalog.MaxMetaEntries || orchestrator.MaxMeshMetaKey > catalog.MaxMetaKeyLength ||
		orchestrator.MaxMeshMetaValue > catalog.MaxMetaValueLength {
		t.Fatal("a mesh block's limits exceed the catalog's")
	}
	m := meshDefinition().Mesh
	m.Tags, m.Meta = nil, map[string]string{}
	for i := range orchestrator.MaxMeshTags {
		m.Tags = append(m.Tags, fmt.Sprintf("%s%d", strings.Repeat("t", orchestrator.MaxMeshTagLength-2), i))
	}
	for i := range orchestrator.MaxMeshMeta {
		m.Meta[fmt.Sprintf("%s%02d", strings.Repeat("K_-", (orchestrator.MaxMeshMetaKey-2)/3), i)] = strings.Repeat("é", orchestrator.MaxMeshMetaValue/2)
	}
	td := meshDefinition()
	td.Mesh = m
	if _, err := validated(t, td); err != nil {
		t.Fatalf("the mesh block refuses its own most: %v", err)
	}
	if err := catalog.ValidateTags("tags", m.GetTags()); err != nil {
		t.Fatalf("the catalog refuses a mesh block's tags: %v", err)
	}
	if err := catalog.ValidateMeta("meta", m.GetMeta()); err != nil {
		t.Fatalf("the catalog refuses a mesh block's meta: %v", err)
	}
}
