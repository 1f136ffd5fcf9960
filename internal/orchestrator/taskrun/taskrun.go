// Package taskrun is the task run operation of the orchestrator's HTTP API
// (POST /v1/tasks/run, `trellis task run`): its route, which the
// orchestrator's module serves, and its body, which the CLI sends.
package taskrun

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// The task run operation (`trellis task run`): one task of a task
// definition placed by hand on a named instance. The server decides the
// placement, as the scheduler decides its own: orchestrator.RunRefusal
// over the instance, the definition and the instance's port holders
// (orchestrator.ReadPortHolders: the leader's cache index, or one read of
// the store on another server), and refuses, naming the instance, the port
// and the task holding it, before anything is written. A placement made
// between the check and the write (the scheduler's, or another run's) is
// the agent's to refuse, as before.

// Path is the operation's route.
const Path = "POST /v1/tasks/run"

// Route serves the task run operation over api. cache is the
// controllers' cache, which answers who holds host ports while this server
// leads (nil: the store always answers); it must hold
// orchestrator.HostPortsCached (the module declares them).
func Route(api resource.API, reg *resource.Registry, cache *controller.Cache) httpapi.Route {
	return httpapi.Route{Pattern: Path, Permission: acl.NamespaceWrite, Handler: taskRun{api: api, reg: reg, cache: cache}.serve}
}

// Request is the operation's body.
type Request struct {
	// TaskDefinition is the definition to run, FAMILY:REVISION.
	TaskDefinition string `json:"task_definition"`
	// Instance is the instance to place the task on.
	Instance string `json:"instance"`
	// StartedBy is recorded as the task's started_by ("trellis task run"
	// when empty).
	StartedBy string `json:"started_by,omitempty"`
}

type taskRun struct {
	api   resource.API
	reg   *resource.Registry
	cache *controller.Cache
}

func (h taskRun) serve(w http.ResponseWriter, r *http.Request) error {
	p, err := httpapi.Params(r, "namespace")
	if err != nil {
		return err
	}
	ns := p["namespace"]
	if ns == "" {
		ns = "default"
	}
	var req Request
	if err := httpapi.DecodeJSON(r, &req); err != nil {
		return err
	}
	res, err := h.run(r.Context(), ns, req)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"task": httpapi.ToWire(h.reg, res)})
	return nil
}

// run checks the placement and writes the task.
func (h taskRun) run(ctx context.Context, ns string, req Request) (*pbresource.Resource, error) {
	family, rev, err := orchestrator.ParseTaskDefinitionRef(req.TaskDefinition)
	if err != nil {
		return nil, httpapi.InputError("task_definition", "%v", err)
	}
	if rev == 0 {
		return nil, httpapi.InputError("task_definition", "%q names no revision: a task runs one revision, %s:N", req.TaskDefinition, family)
	}
	if err := resource.ValidateName("instance", req.Instance); err != nil {
		return nil, err
	}
	tdRes, err := h.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.TaskDefinitionID(ns, family, rev)})
	if status.Code(err) == codes.NotFound {
		return nil, status.Errorf(codes.NotFound, "task definition %s is not registered in namespace %s (trellis taskdef list %s)", req.TaskDefinition, ns, family)
	}
	if err != nil {
		return nil, err
	}
	td, err := resource.DecodeData[*pborch.TaskDefinition](tdRes.GetResource())
	if err != nil {
		return nil, err
	}
	inRes, err := h.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(req.Instance)})
	if status.Code(err) == codes.NotFound {
		return nil, status.Errorf(codes.NotFound, "instance %q is not registered (trellis instance list shows the instances)", req.Instance)
	}
	if err != nil {
		return nil, err
	}
	in, err := orchestrator.DecodeInstance(inRes.GetResource())
	if err != nil {
		return nil, err
	}
	var holders []orchestrator.PortHolder
	if len(orchestrator.FixedHostPorts(td)) > 0 {
		of, err := orchestrator.ReadPortHolders(ctx, h.api, h.cache, ns)
		if err != nil {
			return nil, err
		}
		holders = of(req.Instance)
	}
	if why := orchestrator.RunRefusal(td, req.Instance, in, holders); why != "" {
		return nil, status.Error(codes.FailedPrecondition, why)
	}
	name, err := newTaskName()
	if err != nil {
		return nil, err
	}
	by := req.StartedBy
	if by == "" {
		by = "trellis task run"
	}
	data, err := anypb.New(&pborch.Task{
		TaskDefinition: orchestrator.TaskDefinitionRef(family, rev),
		Instance:       req.Instance,
		StartedBy:      by,
		DesiredStatus:  orchestrator.StatusRunning,
	})
	if err != nil {
		return nil, err
	}
	out, err := h.api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID(ns, name), Data: data}})
	if err != nil {
		return nil, err
	}
	return out.GetResource(), nil
}

// newTaskName is a fresh task name: a lowercase ULID, so names sort by
// creation time.
func newTaskName() (string, error) {
	id, err := ulid.New(ulid.Now(), rand.Reader)
	if err != nil {
		return "", err
	}
	return strings.ToLower(id.String()), nil
}
