package catalog

import (
	"net"
	"slices"
	"sort"
	"strconv"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// This file is the catalog as Consul's HTTP catalog and health API shows
// it (/v1/catalog/services, /v1/catalog/service/{name},
// /v1/health/service/{name}, /v1/catalog/nodes): Consul's JSON field names
// and shapes, so that tools written for Consul (Prometheus's
// consul_sd_configs, consul-template, github.com/hashicorp/consul/api) read
// Trellis's catalog unchanged. The mapping is pure; the catalog's module
// serves it from the server's informer.
//
// A Consul node is a Trellis Instance (machine). An instance registered
// from outside Trellis runs on none: it is shown on a node of its own,
// named after the ServiceInstance, with ExternalNodeMeta, as Consul's
// external services are. Trellis keeps no creation index: CreateIndex is
// the resource's version, as ModifyIndex is.

// ExternalNodeMeta marks the node of an instance registered from outside
// Trellis (the key Consul's external-service monitor uses).
const ExternalNodeMeta = "external-node"

// ConsulNode is a node as Consul's API shows it.
type ConsulNode struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	Meta            map[string]string
	CreateIndex     uint64
	ModifyIndex     uint64
}

// ConsulService is a service instance as Consul's health API shows it.
type ConsulService struct {
	ID                string
	Service           string
	Tags              []string
	Address           string
	Meta              map[string]string
	Port              int
	Weights           ConsulWeights
	EnableTagOverride bool
	Namespace         string `json:",omitempty"`
	Datacenter        string `json:",omitempty"`
	CreateIndex       uint64
	ModifyIndex       uint64
}

// ConsulWeights are a service instance's DNS SRV weights: Consul's
// defaults, which Trellis does not vary.
type ConsulWeights struct {
	Passing int
	Warning int
}

// ConsulCheck is a health check as Consul's API shows it.
type ConsulCheck struct {
	Node        string
	CheckID     string
	Name        string
	Status      string
	Notes       string
	Output      string
	ServiceID   string
	ServiceName string
	ServiceTags []string
	Type        string
	Namespace   string `json:",omitempty"`
	CreateIndex uint64
	ModifyIndex uint64
}

// ConsulServiceEntry is one answer of /v1/health/service/{name}.
type ConsulServiceEntry struct {
	Node    ConsulNode
	Service ConsulService
	Checks  []ConsulCheck
}

// ConsulCatalogService is one answer of /v1/catalog/service/{name}.
type ConsulCatalogService struct {
	ID                       string
	Node                     string
	Address                  string
	Datacenter               string
	TaggedAddresses          map[string]string
	NodeMeta                 map[string]string
	ServiceID                string
	ServiceName              string
	ServiceAddress           string
	ServiceTags              []string
	ServiceMeta              map[string]string
	ServicePort              int
	ServiceWeights           ConsulWeights
	ServiceEnableTagOverride bool
	Checks                   []ConsulCheck
	Namespace                string `json:",omitempty"`
	CreateIndex              uint64
	ModifyIndex              uint64
}

// The Type of a check in Consul's shape: a TTL check's, or a check the
// agent of a task reports (its task's health).
const (
	ConsulCheckTypeTTL  = "ttl"
	ConsulCheckTypeTask = "trellis-task"
)

// ConsulQuery is what a Consul-shaped read of a service asks for.
type ConsulQuery struct {
	// Passing keeps only the instances all of whose checks pass
	// (Consul's ?passing: a warning is left out too).
	Passing bool
	// Tags keeps only the instances that have every one of them
	// (Consul's ?tag=, repeated).
	Tags []string
}

// ConsulInstance is one ServiceInstance with what the mapping needs: its
// resource, its decoded data, and the Instance (machine) it runs on (nil
// for one from outside Trellis, or one whose machine is not known).
type ConsulInstance struct {
	Resource *pbresource.Resource
	Data     *pbcatalog.ServiceInstance
	Node     *pbresource.Resource
	NodeData *pborch.Instance
}

// ConsulEntries maps the instances of a service onto Consul's health
// answer, in the order given, keeping those q selects. dc is the
// datacenter the answer names.
func ConsulEntries(dc string, instances []ConsulInstance, q ConsulQuery) []ConsulServiceEntry {
	out := []ConsulServiceEntry{}
	for _, ci := range instances {
		health := MergeHealth(ci.Data, AgentChecksOf(ci.Resource), ServerChecksOf(ci.Resource))
		if !selected(ci.Data, health, q) {
			continue
		}
		node := consulNode(dc, ci)
		out = append(out, ConsulServiceEntry{
			Node:    node,
			Service: consulService(dc, ci),
			Checks:  consulChecks(node.Node, ci, health),
		})
	}
	return out
}

// ConsulCatalogServices maps the instances of a service onto Consul's
// catalog answer, as ConsulEntries does (the catalog's answer does not
// filter by health; q.Passing is for the health answer).
func ConsulCatalogServices(dc string, instances []ConsulInstance, tags []string) []ConsulCatalogService {
	out := []ConsulCatalogService{}
	for _, e := range ConsulEntries(dc, instances, ConsulQuery{Tags: tags}) {
		out = append(out, ConsulCatalogService{
			ID: e.Node.ID, Node: e.Node.Node, Address: e.Node.Address, Datacenter: dc,
			TaggedAddresses: e.Node.TaggedAddresses, NodeMeta: e.Node.Meta,
			ServiceID: e.Service.ID, ServiceName: e.Service.Service, ServiceAddress: e.Service.Address,
			ServiceTags: e.Service.Tags, ServiceMeta: e.Service.Meta, ServicePort: e.Service.Port,
			ServiceWeights: e.Service.Weights, Checks: e.Checks, Namespace: e.Service.Namespace,
			CreateIndex: e.Service.CreateIndex, ModifyIndex: e.Service.ModifyIndex,
		})
	}
	return out
}

// ConsulServices is Consul's /v1/catalog/services: each service that has
// an instance, with the union of its instances' tags, sorted.
func ConsulServices(instances []*pbcatalog.ServiceInstance) map[string][]string {
	tags := map[string]map[string]bool{}
	for _, si := range instances {
		if si.GetService() == "" {
			continue
		}
		if tags[si.GetService()] == nil {
			tags[si.GetService()] = map[string]bool{}
		}
		for _, t := range si.GetTags() {
			tags[si.GetService()][t] = true
		}
	}
	out := make(map[string][]string, len(tags))
	for svc, set := range tags {
		list := make([]string, 0, len(set))
		for t := range set {
			list = append(list, t)
		}
		sort.Strings(list)
		out[svc] = list
	}
	return out
}

// ConsulNodes is Consul's /v1/catalog/nodes: the Instances (machines),
// then the nodes of the instances registered from outside Trellis, sorted
// by name.
func ConsulNodes(dc string, machines []*pbresource.Resource, machineData []*pborch.Instance, external []ConsulInstance) []ConsulNode {
	out := make([]ConsulNode, 0, len(machines)+len(external))
	for i, m := range machines {
		out = append(out, machineNode(dc, m, machineData[i]))
	}
	for _, ci := range external {
		if ci.Data.GetInstance() == "" {
			out = append(out, consulNode(dc, ci))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func selected(si *pbcatalog.ServiceInstance, health *pbcatalog.ChecksStatus, q ConsulQuery) bool {
	if q.Passing && health.GetHealth() != CheckPassing {
		return false
	}
	for _, t := range q.Tags {
		if !slices.Contains(si.GetTags(), t) {
			return false
		}
	}
	return true
}

func consulNode(dc string, ci ConsulInstance) ConsulNode {
	if ci.Data.GetInstance() == "" {
		idx := IndexOf(ci.Resource)
		return ConsulNode{
			ID: ci.Resource.GetId().GetUid(), Node: ci.Resource.GetId().GetName(), Address: ci.Data.GetAddress(), Datacenter: dc,
			TaggedAddresses: map[string]string{}, Meta: map[string]string{ExternalNodeMeta: "true"},
			CreateIndex: idx, ModifyIndex: idx,
		}
	}
	if ci.Node == nil {
		return ConsulNode{Node: ci.Data.GetInstance(), Datacenter: dc, TaggedAddresses: map[string]string{}, Meta: map[string]string{}}
	}
	return machineNode(dc, ci.Node, ci.NodeData)
}

func machineNode(dc string, m *pbresource.Resource, in *pborch.Instance) ConsulNode {
	idx := IndexOf(m)
	meta := make(map[string]string, len(in.GetAttributes()))
	for k, v := range in.GetAttributes() {
		meta[k] = v
	}
	// An agent registers host:port (its own API's); a node's address is
	// the host alone.
	addr := in.GetAddress()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	tagged := map[string]string{}
	if addr != "" {
		tagged["lan"] = addr
	}
	return ConsulNode{
		ID: m.GetId().GetUid(), Node: m.GetId().GetName(), Address: addr, Datacenter: dc,
		TaggedAddresses: tagged, Meta: meta, CreateIndex: idx, ModifyIndex: idx,
	}
}

func consulService(dc string, ci ConsulInstance) ConsulService {
	idx := IndexOf(ci.Resource)
	tags := ci.Data.GetTags()
	if tags == nil {
		tags = []string{}
	}
	meta := ci.Data.GetMeta()
	if meta == nil {
		meta = map[string]string{}
	}
	return ConsulService{
		ID: ci.Resource.GetId().GetName(), Service: ci.Data.GetService(), Tags: tags,
		Address: ci.Data.GetAddress(), Meta: meta, Port: int(ci.Data.GetPort()),
		Weights: ConsulWeights{Passing: 1, Warning: 1}, Namespace: ci.Resource.GetId().GetTenancy().GetNamespace(),
		Datacenter: dc, CreateIndex: idx, ModifyIndex: idx,
	}
}

func consulChecks(node string, ci ConsulInstance, health *pbcatalog.ChecksStatus) []ConsulCheck {
	idx := IndexOf(ci.Resource)
	tags := ci.Data.GetTags()
	if tags == nil {
		tags = []string{}
	}
	out := make([]ConsulCheck, 0, len(health.GetChecks()))
	for i, c := range health.GetChecks() {
		typ := ConsulCheckTypeTask
		if ci.Data.GetChecks()[i].GetTtl() != nil {
			typ = ConsulCheckTypeTTL
		}
		out = append(out, ConsulCheck{
			Node: node, CheckID: c.GetName(), Name: c.GetName(), Status: c.GetStatus(), Output: c.GetOutput(),
			ServiceID: ci.Resource.GetId().GetName(), ServiceName: ci.Data.GetService(), ServiceTags: tags,
			Type: typ, Namespace: ci.Resource.GetId().GetTenancy().GetNamespace(), CreateIndex: idx, ModifyIndex: idx,
		})
	}
	return out
}

// IndexOf is the store index a resource was last written at (its
// version); 0 when the version is not an index.
func IndexOf(res *pbresource.Resource) uint64 {
	idx, err := strconv.ParseUint(res.GetVersion(), 10, 64)
	if err != nil {
		return 0
	}
	return idx
}
