package catalogmodule

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// consulAPI serves the catalog as Consul's HTTP catalog and health API
// does (catalog.ConsulEntries and its peers), read only, from the server's
// informer: any server answers, followers too, with what it has applied
// (Consul's default, stale mode) or, with ?consistent, after it has caught
// up with the leader's read index.
type consulAPI struct {
	in         *informer.Informer
	datacenter string
	// machines: the server has the orchestrator's Instances, which are
	// Consul's nodes.
	machines bool
	// serverID names this server (module.Cluster.ServerID), as
	// /v1/agent/self's NodeName.
	serverID string
	// changes are the services' own indexes, for the blocking queries of
	// one service.
	changes *serviceChanges
	// answers are the encoded answers of the reads of one service, shared
	// by the requests at the same index.
	answers *answerCache
}

// consulTypes are the informer's types the routes read.
func consulTypes(machines bool) []controller.CachedType {
	types := slices.Clone(catalog.InstancesCached)
	if machines {
		types = append(types, controller.CachedType{Type: orchestrator.InstanceType, Derived: []*controller.Derived{orchestrator.MergedInstance}})
	}
	return types
}

// routes are Consul's read routes. A service's routes need namespace:read
// on the namespace asked for (?ns=, Consul's, or ?namespace=); the nodes
// are the cluster's Instances, which need operator:read, as reading them
// through the resource API does. /v1/agent/self says only which
// datacenter this is, which a catalog reader needs (Prometheus's
// consul_sd_configs asks it first when its configuration names none), so
// it needs what reading the catalog does.
func (c consulAPI) routes() []httpapi.Route {
	return []httpapi.Route{
		{Pattern: "GET /v1/catalog/services", Permission: acl.NamespaceRead, Handler: c.services},
		{Pattern: "/v1/catalog/services", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET")},
		{Pattern: "GET /v1/catalog/service/{service}", Permission: acl.NamespaceRead, Handler: c.catalogService},
		{Pattern: "/v1/catalog/service/{service}", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET")},
		{Pattern: "GET /v1/health/service/{service}", Permission: acl.NamespaceRead, Handler: c.healthService},
		{Pattern: "/v1/health/service/{service}", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET")},
		{Pattern: "GET /v1/catalog/nodes", Permission: acl.OperatorRead, Handler: c.nodes},
		{Pattern: "/v1/catalog/nodes", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET")},
		{Pattern: "GET /v1/agent/self", Permission: acl.NamespaceRead, Handler: c.self},
		{Pattern: "/v1/agent/self", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET")},
	}
}

// consulQuery is a Consul-shaped request's parameters.
type consulQuery struct {
	namespace string
	query     informer.Query // ?index, ?wait, ?consistent, ?stale
	passing   bool
	tags      []string
}

// Parameters every Consul read takes, and those Trellis refuses by name
// with the reason (a filter it would not apply must not answer as if it
// had).
var (
	consulCommonParams = []string{"dc", "ns", "namespace", "partition", "index", "wait", "stale", "consistent", "cached"}
	consulNotServed    = map[string]string{
		"filter":    "filter expressions are not evaluated; filter with ?tag= or ?passing, or read the resource API",
		"near":      "no network coordinates are kept, so nothing is sorted by distance",
		"node-meta": "filter the nodes' attributes with the resource API",
		"peer":      "there is no cluster peering",
		"token":     "send the token in the X-Consul-Token or X-Trellis-Token header",
	}
)

// parse reads r's parameters: the common ones and extra, refusing any
// other by name.
func (c consulAPI) parse(r *http.Request, extra ...string) (consulQuery, error) {
	values := r.URL.Query()
	if err := checkParams(values, extra); err != nil {
		return consulQuery{}, err
	}
	one := func(k string) string { return values.Get(k) }
	q := consulQuery{namespace: one("namespace"), tags: values["tag"]}
	if ns := one("ns"); ns != "" {
		if q.namespace != "" && q.namespace != ns {
			return q, httpapi.InputError("ns", "names namespace %q and namespace names %q: give one", ns, q.namespace)
		}
		q.namespace = ns
	}
	if q.namespace == "" {
		q.namespace = resource.DefaultNamespace
	}
	if dc := one("dc"); dc != "" && dc != c.datacenter {
		return q, httpapi.InputError("dc", "this server answers for datacenter %q only, not %q", c.datacenter, dc)
	}
	if p := one("partition"); p != "" && p != "default" {
		return q, notServed("partition", fmt.Sprintf("there are no admin partitions but \"default\", not %q", p))
	}
	for _, t := range q.tags {
		if t == "" {
			return q, httpapi.InputError("tag", "must not be empty")
		}
	}
	var err error
	if q.query, err = informer.ParseQuery(values); err != nil {
		// ParseQuery's refusal names the parameter: "index: ..."
		field, reason, _ := strings.Cut(strings.TrimPrefix(err.Error(), informer.ErrBadQuery.Error()+": "), ": ")
		return q, httpapi.InputError(field, "%s", reason)
	}
	if _, err := consulFlag("cached", one("cached"), values.Has("cached")); err != nil {
		return q, err
	}
	if slices.Contains(extra, "passing") {
		if q.passing, err = consulFlag("passing", one("passing"), values.Has("passing")); err != nil {
			return q, err
		}
	}
	return q, nil
}

// answer waits as q asks (informer.Await: loaded, consistent when asked,
// then blocking on a change of any of types past q's index), then writes
// what view builds, with the index it answers at in X-Consul-Index. The
// index is read before the view is built, so the view holds at least
// every change up to it.
func (c consulAPI) answer(w http.ResponseWriter, r *http.Request, q consulQuery, types []*pbresource.Type, view func() any) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(httpapi.Stopping(r.Context()), cancel)
	defer stop()
	var idx uint64
	if len(types) == 1 {
		var err error
		if idx, err = c.in.Await(ctx, types[0], q.query); err != nil {
			return err
		}
	} else {
		// Loaded (and consistent, when asked) for each type, then
		// blocking on a change of any.
		for _, typ := range types {
			if _, err := c.in.Await(ctx, typ, informer.Query{Consistent: q.query.Consistent}); err != nil {
				return err
			}
		}
		if q.query.MinIndex > 0 {
			wctx, wcancel := context.WithTimeout(ctx, waitOf(q.query))
			c.waitChange(wctx, types, q.query.MinIndex)
			wcancel()
			if err := r.Context().Err(); err != nil {
				return err
			}
		}
		idx = 1 // Consul never answers 0: a client would spin on it
		for _, typ := range types {
			idx = max(idx, c.in.LastChange(typ))
		}
	}
	body, err := httpapi.EncodeJSON(view())
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	writeConsul(w, idx, body)
	return nil
}

// answerService answers a read of one service (catalog.ServiceKey
// service): loaded (and consistent, when asked), then, blocking, waiting
// for that service to change (serviceChanges), it answers with the
// service's own index and the answer of key at that index, shared with
// every request for the same (answerCache); view builds it when none has
// yet. The indexes are read before the view is built, so the view holds
// at least every change up to them.
func (c consulAPI) answerService(w http.ResponseWriter, r *http.Request, q consulQuery, service string, key answerKey, view func() any) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(httpapi.Stopping(r.Context()), cancel)
	defer stop()
	if _, err := c.in.Await(ctx, catalog.ServiceInstanceType, informer.Query{Consistent: q.query.Consistent}); err != nil {
		return err
	}
	if q.query.MinIndex > 0 {
		wctx, wcancel := context.WithTimeout(ctx, waitOf(q.query))
		c.changes.wait(wctx, service, q.query.MinIndex)
		wcancel()
		if err := r.Context().Err(); err != nil {
			return err
		}
	}
	idx := c.changes.of(service)
	at := answerIndexes{service: max(idx, 1)}
	if c.machines {
		at.nodes = c.in.LastChange(orchestrator.InstanceType)
	}
	body, err := c.answers.get(service, key, at, func() ([]byte, error) {
		body, err := httpapi.EncodeJSON(view())
		if err != nil {
			return nil, fmt.Errorf("encoding the answer: %w", err)
		}
		return body, nil
	})
	if err != nil {
		return err
	}
	writeConsul(w, at.service, body)
	return nil
}

// writeConsul writes an encoded answer at index idx, with Consul's
// headers.
func writeConsul(w http.ResponseWriter, idx uint64, body []byte) {
	w.Header().Set("X-Consul-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("X-Consul-LastContact", "0")
	httpapi.WriteEncodedJSON(w, http.StatusOK, body)
}

// waitOf is how long a blocking query q waits: its wait, the default
// when it names none, never over the cap.
func waitOf(q informer.Query) time.Duration {
	if q.Wait <= 0 {
		return informer.DefaultQueryWait
	}
	return min(q.Wait, informer.MaxQueryWait)
}

// waitChange returns once any of types has changed past after, or ctx
// ends.
func (c consulAPI) waitChange(ctx context.Context, types []*pbresource.Type, after uint64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, len(types))
	for _, typ := range types {
		go func() {
			_, _ = c.in.WaitChange(ctx, typ, after)
			done <- struct{}{}
		}()
	}
	<-done
}

// instancesOf returns the cached instances of service name in ns, with
// the machines they run on.
func (c consulAPI) instancesOf(ns, name string) []catalog.ConsulInstance {
	objs := c.in.ByIndex(catalog.ServiceInstanceType, catalog.InstancesByService.Name, catalog.ServiceKey(ns, name))
	out := make([]catalog.ConsulInstance, 0, len(objs))
	for _, o := range objs {
		ci, ok := c.consulInstance(o)
		if ok {
			out = append(out, ci)
		}
	}
	return out
}

func (c consulAPI) consulInstance(o *controller.Object) (catalog.ConsulInstance, bool) {
	si, ok := controller.Decoded[*pbcatalog.ServiceInstance](o)
	if !ok {
		return catalog.ConsulInstance{}, false
	}
	ci := catalog.ConsulInstance{Resource: o.Resource, Data: si}
	if c.machines && si.GetInstance() != "" {
		if m := c.in.Get(orchestrator.InstanceID(si.GetInstance())); m != nil {
			// Merged once per change of the Instance by the cache, not
			// once per answer (MergedInstance).
			if data, ok := orchestrator.CachedInstance(m); ok {
				ci.Node, ci.NodeData = m.Resource, data
			}
		}
	}
	return ci, true
}

func (c consulAPI) services(w http.ResponseWriter, r *http.Request) error {
	q, err := c.parse(r)
	if err != nil {
		return err
	}
	return c.answer(w, r, q, []*pbresource.Type{catalog.ServiceInstanceType}, func() any {
		var list []*pbcatalog.ServiceInstance
		for _, o := range c.in.List(catalog.ServiceInstanceType) {
			if o.Resource.GetId().GetTenancy().GetNamespace() != q.namespace {
				continue
			}
			if si, ok := controller.Decoded[*pbcatalog.ServiceInstance](o); ok {
				list = append(list, si)
			}
		}
		return catalog.ConsulServices(list)
	})
}

func (c consulAPI) serviceTypes() []*pbresource.Type {
	if c.machines {
		return []*pbresource.Type{catalog.ServiceInstanceType, orchestrator.InstanceType}
	}
	return []*pbresource.Type{catalog.ServiceInstanceType}
}

func (c consulAPI) catalogService(w http.ResponseWriter, r *http.Request) error {
	q, err := c.parse(r, "tag")
	if err != nil {
		return err
	}
	name := r.PathValue("service")
	return c.answerService(w, r, q, catalog.ServiceKey(q.namespace, name), newAnswerKey("catalog", q), func() any {
		return catalog.ConsulCatalogServices(c.datacenter, c.instancesOf(q.namespace, name), q.tags)
	})
}

func (c consulAPI) healthService(w http.ResponseWriter, r *http.Request) error {
	q, err := c.parse(r, "tag", "passing")
	if err != nil {
		return err
	}
	name := r.PathValue("service")
	return c.answerService(w, r, q, catalog.ServiceKey(q.namespace, name), newAnswerKey("health", q), func() any {
		return catalog.ConsulEntries(c.datacenter, c.instancesOf(q.namespace, name), catalog.ConsulQuery{Passing: q.passing, Tags: q.tags})
	})
}

func (c consulAPI) nodes(w http.ResponseWriter, r *http.Request) error {
	q, err := c.parse(r)
	if err != nil {
		return err
	}
	return c.answer(w, r, q, c.serviceTypes(), func() any {
		var machines []*pbresource.Resource
		var data []*pborch.Instance
		if c.machines {
			for _, o := range c.in.List(orchestrator.InstanceType) {
				if in, ok := orchestrator.CachedInstance(o); ok {
					machines = append(machines, o.Resource)
					data = append(data, in)
				}
			}
		}
		var external []catalog.ConsulInstance
		for _, o := range c.in.List(catalog.ServiceInstanceType) {
			if o.Resource.GetId().GetTenancy().GetNamespace() != q.namespace {
				continue
			}
			if ci, ok := c.consulInstance(o); ok && ci.Data.GetInstance() == "" {
				external = append(external, ci)
			}
		}
		return catalog.ConsulNodes(c.datacenter, machines, data, external)
	})
}

// checkParams refuses a parameter of values that is neither common nor
// one of extra, or given more than once (but ?tag=), naming the first in
// order. Every answer passes here: the parameters are sorted only to
// name a refused one.
func checkParams(values url.Values, extra []string) error {
	bad := false
	for k, v := range values {
		if !slices.Contains(consulCommonParams, k) && !slices.Contains(extra, k) || len(v) > 1 && k != "tag" {
			bad = true
			break
		}
	}
	if !bad {
		return nil
	}
	allowed := append(slices.Clone(consulCommonParams), extra...)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if why, ok := consulNotServed[k]; ok {
			return notServed(k, why)
		}
		if !slices.Contains(allowed, k) {
			return httpapi.InputError("query", "unknown parameter %q (this path takes: %s)", k, strings.Join(allowed, ", "))
		}
		if len(values[k]) > 1 && k != "tag" {
			return httpapi.InputError(k, "given %d times; give it once", len(values[k]))
		}
	}
	return nil
}

// consulFlag reads a Consul boolean parameter: present without a value,
// or a value strconv.ParseBool takes.
func consulFlag(name, v string, given bool) (bool, error) {
	if !given {
		return false, nil
	}
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, httpapi.InputError(name, "must be given bare, or as 1, true, 0 or false, got %q", v)
	}
	return b, nil
}

func notServed(name, why string) error {
	return httpapi.InputError(name, "is not served by Trellis's Consul-compatible API: %s", why)
}

// consulSelf is the part of Consul's /v1/agent/self that tools read to
// learn the datacenter they talk to.
type consulSelf struct {
	Config struct {
		Datacenter string
		NodeName   string
		Server     bool
	}
}

func (c consulAPI) self(w http.ResponseWriter, r *http.Request) error {
	if _, err := httpapi.Params(r); err != nil {
		return err
	}
	var out consulSelf
	out.Config.Datacenter, out.Config.NodeName, out.Config.Server = c.datacenter, c.serverID, true
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}
