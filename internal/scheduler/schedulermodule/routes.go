package schedulermodule

import (
	"encoding/json"
	"net/http"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler/operations"
)

// The daemon scheduler's operations (seed 002) under /v1/environments;
// docs/scheduler.md is their contract. Each needs namespace:read or
// namespace:write on the ?namespace= it names; the resource writes it makes
// go through the resource service's type hooks as well.

// routes serves the operations over HTTP.
type routes struct {
	ops *operations.Operations
	reg *resource.Registry
}

func (h routes) table() []httpapi.Route {
	const (
		envs = "/v1/environments"
		env  = envs + "/{name}"
		deps = env + "/deployments"
		dep  = deps + "/{id}"
	)
	return []httpapi.Route{
		{Pattern: "POST " + envs, Permission: acl.NamespaceWrite, Handler: h.createEnvironment},
		{Pattern: "GET " + envs, Permission: acl.NamespaceRead, Handler: h.list("environments", func(r *http.Request, q query) ([]*pbresource.Resource, error) {
			return h.ops.ListEnvironments(r.Context(), q.namespace, q.params["type"])
		}, "type")},
		{Pattern: envs, Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET, POST")},
		{Pattern: "GET " + env, Permission: acl.NamespaceRead, Handler: h.getEnvironment},
		{Pattern: "PUT " + env, Permission: acl.NamespaceWrite, Handler: h.updateEnvironment},
		{Pattern: "DELETE " + env, Permission: acl.NamespaceWrite, Handler: h.one("environment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
			return h.ops.DeleteEnvironment(r.Context(), ns, r.PathValue("name"))
		})},
		{Pattern: env, Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET, PUT, DELETE")},
		{Pattern: "GET " + env + "/status", Permission: acl.NamespaceRead, Handler: h.environmentStatus},
		{Pattern: "GET " + env + "/diff", Permission: acl.NamespaceRead, Handler: h.environmentDiff},
		{Pattern: "GET " + env + "/versions", Permission: acl.NamespaceRead, Handler: h.list("versions", func(r *http.Request, q query) ([]*pbresource.Resource, error) {
			return h.ops.Versions(r.Context(), q.namespace, r.PathValue("name"))
		})},
		{Pattern: "POST " + deps, Permission: acl.NamespaceWrite, Handler: h.one("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
			v, err := decodeVersion(r)
			if err != nil {
				return nil, err
			}
			return h.ops.StartDeployment(r.Context(), ns, r.PathValue("name"), v)
		})},
		{Pattern: "GET " + deps, Permission: acl.NamespaceRead, Handler: h.list("deployments", func(r *http.Request, q query) ([]*pbresource.Resource, error) {
			return h.ops.ListDeployments(r.Context(), q.namespace, r.PathValue("name"))
		})},
		{Pattern: deps, Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET, POST")},
		{Pattern: "GET " + dep, Permission: acl.NamespaceRead, Handler: h.one("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
			return h.ops.GetDeployment(r.Context(), ns, r.PathValue("name"), r.PathValue("id"))
		})},
		{Pattern: "POST " + dep + "/stop", Permission: acl.NamespaceWrite, Handler: h.one("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
			return h.ops.StopDeployment(r.Context(), ns, r.PathValue("name"), r.PathValue("id"))
		})},
		{Pattern: "POST " + env + "/rollback", Permission: acl.NamespaceWrite, Handler: h.one("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
			v, err := decodeVersion(r)
			if err != nil {
				return nil, err
			}
			return h.ops.RollbackDeployment(r.Context(), ns, r.PathValue("name"), v)
		})},
	}
}

// specBody is an environment spec as people write it.
type specBody struct {
	Name           string          `json:"name"`
	Type           string          `json:"type"`
	TaskDefinition string          `json:"task_definition"`
	InstanceGroup  json.RawMessage `json:"instance_group"`
	Deployment     json.RawMessage `json:"deployment"`
	Role           string          `json:"role"`
}

func decodeSpec(r *http.Request) (operations.Spec, error) {
	var b specBody
	if err := httpapi.DecodeJSON(r, &b); err != nil {
		return operations.Spec{}, err
	}
	spec := operations.Spec{Name: b.Name, Type: b.Type, TaskDefinition: b.TaskDefinition, Role: b.Role}
	if len(b.InstanceGroup) > 0 && string(b.InstanceGroup) != "null" {
		spec.InstanceGroup = &pbscheduler.InstanceGroup{}
		if err := httpapi.UnmarshalProto(b.InstanceGroup, spec.InstanceGroup, "instance_group"); err != nil {
			return operations.Spec{}, err
		}
	}
	if len(b.Deployment) > 0 && string(b.Deployment) != "null" {
		spec.Deployment = &pbscheduler.DeploymentConfig{}
		if err := httpapi.UnmarshalProto(b.Deployment, spec.Deployment, "deployment"); err != nil {
			return operations.Spec{}, err
		}
	}
	return spec, nil
}

// versionBody names a version to deploy or roll back to.
type versionBody struct {
	Version string `json:"version"`
}

func decodeVersion(r *http.Request) (string, error) {
	if r.ContentLength == 0 {
		return "", nil
	}
	var b versionBody
	if err := httpapi.DecodeJSON(r, &b); err != nil {
		return "", err
	}
	return b.Version, nil
}

// query is an operation's query: the namespace ("default" when the
// request names none) and the other parameters it takes.
type query struct {
	namespace string
	params    map[string]string
}

func parseQuery(r *http.Request, allowed ...string) (query, error) {
	p, err := httpapi.Params(r, append([]string{"namespace"}, allowed...)...)
	if err != nil {
		return query{}, err
	}
	q := query{namespace: p["namespace"], params: p}
	if q.namespace == "" {
		q.namespace = "default"
	}
	return q, nil
}

func (h routes) createEnvironment(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	spec, err := decodeSpec(r)
	if err != nil {
		return err
	}
	res, err := h.ops.CreateEnvironment(r.Context(), q.namespace, spec)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"environment": httpapi.ToWire(h.reg, res.Environment), "version": res.Version})
	return nil
}

func (h routes) updateEnvironment(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	spec, err := decodeSpec(r)
	if err != nil {
		return err
	}
	res, err := h.ops.UpdateEnvironment(r.Context(), q.namespace, r.PathValue("name"), spec)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"environment": httpapi.ToWire(h.reg, res.Environment), "version": res.Version, "unchanged": res.Unchanged})
	return nil
}

func (h routes) getEnvironment(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	info, err := h.ops.GetEnvironment(r.Context(), q.namespace, r.PathValue("name"))
	if err != nil {
		return err
	}
	out := map[string]any{"environment": httpapi.ToWire(h.reg, info.Environment), "state": httpapi.ProtoJSON(info.State)}
	if info.ActiveDeployment != nil {
		out["active_deployment"] = httpapi.ToWire(h.reg, info.ActiveDeployment)
	}
	if info.DesiredVersion != nil {
		out["desired_version"] = httpapi.ToWire(h.reg, info.DesiredVersion)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (h routes) environmentStatus(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	st, err := h.ops.EnvironmentState(r.Context(), q.namespace, r.PathValue("name"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ProtoJSON(st))
	return nil
}

func (h routes) environmentDiff(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "version")
	if err != nil {
		return err
	}
	d, err := h.ops.Diff(r.Context(), q.namespace, r.PathValue("name"), q.params["version"])
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ProtoJSON(d))
	return nil
}

// one serves an operation that answers one resource, as {key: R}.
func (h routes) one(key string, op func(r *http.Request, ns string) (*pbresource.Resource, error)) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := parseQuery(r)
		if err != nil {
			return err
		}
		res, err := op(r, q.namespace)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{key: httpapi.ToWire(h.reg, res)})
		return nil
	}
}

// list serves an operation that answers a list, as {key: [R...]}; params
// are the query parameters it takes besides the namespace.
func (h routes) list(key string, op func(r *http.Request, q query) ([]*pbresource.Resource, error), params ...string) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := parseQuery(r, params...)
		if err != nil {
			return err
		}
		list, err := op(r, q)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{key: httpapi.ToWireList(h.reg, list)})
		return nil
	}
}
