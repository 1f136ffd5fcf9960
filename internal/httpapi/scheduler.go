package httpapi

import (
	"encoding/json"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/scheduler/operations"
)

// The daemon scheduler's operations (seed 002) under /v1/environments;
// docs/scheduler.md is their contract. Each needs namespace:read or
// namespace:write on the ?namespace= it names; the resource writes it makes
// go through the resource service's type hooks as well.

func (h *Handler) schedulerRoutes() {
	const (
		envs = "/v1/environments"
		env  = envs + "/{name}"
		deps = env + "/deployments"
		dep  = deps + "/{id}"
	)
	h.handle("POST "+envs, acl.NamespaceWrite, h.createEnvironment)
	h.handle("GET "+envs, acl.NamespaceRead, h.schedList("environments", func(r *http.Request, q query) ([]*pbresource.Resource, error) {
		return h.sched.ListEnvironments(r.Context(), q.namespace, q.typ)
	}, "type"))
	h.handle(envs, acl.Public, methodNotAllowed("GET, POST"))
	h.handle("GET "+env, acl.NamespaceRead, h.getEnvironment)
	h.handle("PUT "+env, acl.NamespaceWrite, h.updateEnvironment)
	h.handle("DELETE "+env, acl.NamespaceWrite, h.schedOne("environment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
		return h.sched.DeleteEnvironment(r.Context(), ns, r.PathValue("name"))
	}))
	h.handle(env, acl.Public, methodNotAllowed("GET, PUT, DELETE"))
	h.handle("GET "+env+"/status", acl.NamespaceRead, h.environmentStatus)
	h.handle("GET "+env+"/diff", acl.NamespaceRead, h.environmentDiff)
	h.handle("GET "+env+"/versions", acl.NamespaceRead, h.schedList("versions", func(r *http.Request, q query) ([]*pbresource.Resource, error) {
		return h.sched.Versions(r.Context(), q.namespace, r.PathValue("name"))
	}))
	h.handle("POST "+deps, acl.NamespaceWrite, h.schedOne("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
		v, err := h.decodeVersion(r)
		if err != nil {
			return nil, err
		}
		return h.sched.StartDeployment(r.Context(), ns, r.PathValue("name"), v)
	}))
	h.handle("GET "+deps, acl.NamespaceRead, h.schedList("deployments", func(r *http.Request, q query) ([]*pbresource.Resource, error) {
		return h.sched.ListDeployments(r.Context(), q.namespace, r.PathValue("name"))
	}))
	h.handle(deps, acl.Public, methodNotAllowed("GET, POST"))
	h.handle("GET "+dep, acl.NamespaceRead, h.schedOne("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
		return h.sched.GetDeployment(r.Context(), ns, r.PathValue("name"), r.PathValue("id"))
	}))
	h.handle("POST "+dep+"/stop", acl.NamespaceWrite, h.schedOne("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
		return h.sched.StopDeployment(r.Context(), ns, r.PathValue("name"), r.PathValue("id"))
	}))
	h.handle("POST "+env+"/rollback", acl.NamespaceWrite, h.schedOne("deployment", func(r *http.Request, ns string) (*pbresource.Resource, error) {
		v, err := h.decodeVersion(r)
		if err != nil {
			return nil, err
		}
		return h.sched.RollbackDeployment(r.Context(), ns, r.PathValue("name"), v)
	}))
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

func (h *Handler) decodeSpec(r *http.Request) (operations.Spec, error) {
	var b specBody
	if err := decodeJSON(http.MaxBytesReader(nil, r.Body, h.maxBody), &b); err != nil {
		return operations.Spec{}, err
	}
	spec := operations.Spec{Name: b.Name, Type: b.Type, TaskDefinition: b.TaskDefinition, Role: b.Role}
	if len(b.InstanceGroup) > 0 && string(b.InstanceGroup) != "null" {
		spec.InstanceGroup = &pbscheduler.InstanceGroup{}
		if err := unmarshalOpts.Unmarshal(b.InstanceGroup, spec.InstanceGroup); err != nil {
			return operations.Spec{}, inputError("instance_group", "%s", cleanProtoError(err))
		}
	}
	if len(b.Deployment) > 0 && string(b.Deployment) != "null" {
		spec.Deployment = &pbscheduler.DeploymentConfig{}
		if err := unmarshalOpts.Unmarshal(b.Deployment, spec.Deployment); err != nil {
			return operations.Spec{}, inputError("deployment", "%s", cleanProtoError(err))
		}
	}
	return spec, nil
}

// versionBody names a version to deploy or roll back to.
type versionBody struct {
	Version string `json:"version"`
}

func (h *Handler) decodeVersion(r *http.Request) (string, error) {
	if r.ContentLength == 0 {
		return "", nil
	}
	var b versionBody
	if err := decodeJSON(http.MaxBytesReader(nil, r.Body, h.maxBody), &b); err != nil {
		return "", err
	}
	return b.Version, nil
}

func (h *Handler) schedNamespace(r *http.Request, allowed ...string) (query, error) {
	q, err := parseQuery(r.URL.Query(), append([]string{"namespace"}, allowed...)...)
	if err != nil {
		return q, err
	}
	if q.namespace == "" {
		q.namespace = "default"
	}
	return q, nil
}

func (h *Handler) createEnvironment(w http.ResponseWriter, r *http.Request) error {
	q, err := h.schedNamespace(r)
	if err != nil {
		return err
	}
	spec, err := h.decodeSpec(r)
	if err != nil {
		return err
	}
	res, err := h.sched.CreateEnvironment(r.Context(), q.namespace, spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"environment": toWire(h.reg, res.Environment), "version": res.Version})
	return nil
}

func (h *Handler) updateEnvironment(w http.ResponseWriter, r *http.Request) error {
	q, err := h.schedNamespace(r)
	if err != nil {
		return err
	}
	spec, err := h.decodeSpec(r)
	if err != nil {
		return err
	}
	res, err := h.sched.UpdateEnvironment(r.Context(), q.namespace, r.PathValue("name"), spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"environment": toWire(h.reg, res.Environment), "version": res.Version, "unchanged": res.Unchanged})
	return nil
}

func (h *Handler) getEnvironment(w http.ResponseWriter, r *http.Request) error {
	q, err := h.schedNamespace(r)
	if err != nil {
		return err
	}
	info, err := h.sched.GetEnvironment(r.Context(), q.namespace, r.PathValue("name"))
	if err != nil {
		return err
	}
	out := map[string]any{"environment": toWire(h.reg, info.Environment), "state": protoJSON(info.State)}
	if info.ActiveDeployment != nil {
		out["active_deployment"] = toWire(h.reg, info.ActiveDeployment)
	}
	if info.DesiredVersion != nil {
		out["desired_version"] = toWire(h.reg, info.DesiredVersion)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) environmentStatus(w http.ResponseWriter, r *http.Request) error {
	q, err := h.schedNamespace(r)
	if err != nil {
		return err
	}
	st, err := h.sched.EnvironmentState(r.Context(), q.namespace, r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, protoJSON(st))
	return nil
}

func (h *Handler) environmentDiff(w http.ResponseWriter, r *http.Request) error {
	q, err := h.schedNamespace(r, "version")
	if err != nil {
		return err
	}
	d, err := h.sched.Diff(r.Context(), q.namespace, r.PathValue("name"), q.version)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, protoJSON(d))
	return nil
}

// schedOne serves an operation that answers one resource, as {key: R}.
func (h *Handler) schedOne(key string, op func(r *http.Request, ns string) (*pbresource.Resource, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := h.schedNamespace(r)
		if err != nil {
			return err
		}
		res, err := op(r, q.namespace)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{key: toWire(h.reg, res)})
		return nil
	}
}

// schedList serves an operation that answers a list, as {key: [R...]};
// params are the query parameters it takes besides the namespace.
func (h *Handler) schedList(key string, op func(r *http.Request, q query) ([]*pbresource.Resource, error), params ...string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := h.schedNamespace(r, params...)
		if err != nil {
			return err
		}
		list, err := op(r, q)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{key: h.wireAll(list)})
		return nil
	}
}

func (h *Handler) wireAll(list []*pbresource.Resource) []*wire.Resource {
	out := make([]*wire.Resource, len(list))
	for i, res := range list {
		out[i] = toWire(h.reg, res)
	}
	return out
}

// protoJSON renders a computed view with every field present, so that a
// zero count reads 0 rather than missing.
func protoJSON(m proto.Message) json.RawMessage {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}
