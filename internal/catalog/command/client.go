package command

import (
	"context"
	"net/url"
	"sort"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
)

var (
	serviceWire  = wire.Type{Group: catalog.Group, GroupVersion: catalog.GroupVersion, Kind: catalog.ServiceType.GetKind()}
	instanceWire = wire.Type{Group: catalog.Group, GroupVersion: catalog.GroupVersion, Kind: catalog.ServiceInstanceType.GetKind()}
)

func namespaceOr(ns string) string {
	if ns == "" {
		return resource.DefaultNamespace
	}
	return ns
}

// instance is a ServiceInstance as the API returned it, decoded.
type instance struct {
	res  *wire.Resource
	data *pbcatalog.ServiceInstance
}

// listInstances lists the instances of namespace ns ("*": every one),
// decoded.
func listInstances(ctx context.Context, c *client.Client, ns string) ([]instance, error) {
	list, err := c.List(ctx, instanceWire, client.ListOptions{Namespace: ns})
	if err != nil {
		return nil, err
	}
	out := make([]instance, 0, len(list))
	for _, r := range list {
		var si pbcatalog.ServiceInstance
		if err := cli.DecodeData(r, &si); err != nil {
			return nil, err
		}
		out = append(out, instance{res: r, data: &si})
	}
	return out, nil
}

// healthOf reads the instances of service name in ns with their health
// and checks as every reader sees them (the servers merge the agent's
// report and their own), through the Consul-compatible health route,
// consistent: a command run after a write (register, check) sees it.
func healthOf(ctx context.Context, c *client.Client, ns, name string) (map[string]catalog.ConsulServiceEntry, error) {
	var entries []catalog.ConsulServiceEntry
	if err := c.Do(ctx, "GET", c.URL("/v1/health/service/"+url.PathEscape(name), url.Values{"ns": {ns}, "consistent": {""}}), nil, &entries); err != nil {
		return nil, err
	}
	out := make(map[string]catalog.ConsulServiceEntry, len(entries))
	for _, e := range entries {
		out[e.Service.ID] = e
	}
	return out, nil
}

// healthWord is an instance's aggregate health from its checks in
// Consul's shape (passing for none).
func healthWord(e catalog.ConsulServiceEntry, ok bool) string {
	if !ok {
		return "unknown"
	}
	checks := make([]*pbcatalog.CheckStatus, len(e.Checks))
	for i, c := range e.Checks {
		checks[i] = &pbcatalog.CheckStatus{Status: c.Status}
	}
	return catalog.Aggregate(checks)
}

// runsOn says where an instance runs: its task on its instance, or
// outside Trellis.
func runsOn(si *pbcatalog.ServiceInstance) string {
	if si.GetInstance() == "" {
		return "outside Trellis"
	}
	return "task " + si.GetTask() + " on " + si.GetInstance()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
