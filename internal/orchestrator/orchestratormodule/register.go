package orchestratormodule

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// maxRegisterAttempts bounds Register's compare-and-swap rounds: a
// conflict means someone wrote the Instance in between (an operator
// draining it, the servers marking it down), which settles in a few.
const maxRegisterAttempts = 10

// registrar is AgentService.Register: an agent's registration is a
// server-side operation, since the agent of an instance owns the
// Instance's status["agent"] and a restarted agent's new session proves
// nothing yet. The caller is checked here: a Connect agent leaf (the
// server's edge marks the call resource.AsAgent) must name the instance;
// without one, the agent permission the edge checked is the proof, as it
// was when agents wrote their Instance's data. The registration is then
// written as that instance's agent, which never moves the Instance's
// generation; the data (the operator's) is only created, or given the
// cluster the agent names.
type registrar struct {
	api resource.API
	now func() time.Time
}

func (r registrar) Register(ctx context.Context, req *pbagent.RegisterRequest) (*pbagent.RegisterResponse, error) {
	name := req.GetInstance()
	if err := resource.ValidateName("instance", name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetRegistration() == nil {
		return nil, status.Error(codes.InvalidArgument, "registration: is required")
	}
	if w := resource.StatusWriterOf(ctx); w.Agent != "" && w.Agent != name {
		return nil, status.Errorf(codes.PermissionDenied, "instance: the caller's Connect leaf is the agent of instance %q, not of %q", w.Agent, name)
	}
	cluster := req.GetCluster()
	if cluster == "" {
		cluster = orchestrator.DefaultCluster
	}
	reg := proto.Clone(req.GetRegistration()).(*pborch.AgentRegistration)
	if reg.RegisteredAt == nil {
		reg.RegisteredAt = timestamppb.New(r.now())
	}
	if err := orchestrator.ValidateAgentRegistration(reg); err != nil {
		return nil, status.Error(codes.InvalidArgument, "registration."+err.Error())
	}
	payload, err := anypb.New(reg)
	if err != nil {
		return nil, err
	}
	id := orchestrator.InstanceID(name)
	for attempt := 1; ; attempt++ {
		w, generation, err := r.instance(ctx, id, cluster, reg.GetLeft())
		if err != nil {
			return nil, err
		}
		if w == nil {
			return &pbagent.RegisterResponse{}, nil // leaving an Instance that is gone
		}
		// One commit: the Instance (created, or its data brought in line,
		// or as it is) and the registration on it.
		resp, err := r.api.WriteBatch(resource.AsAgent(ctx, name), &pbresource.WriteBatchRequest{
			Resources: []*pbresource.Resource{w},
			Statuses: []*pbresource.WriteStatusRequest{{
				Id: id, Key: orchestrator.AgentStatusKey,
				Status: &pbresource.Status{ObservedGeneration: generation, Data: payload},
			}},
		})
		if status.Code(err) == codes.Aborted && attempt < maxRegisterAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		in, err := orchestrator.DecodeInstance(resp.GetStatuses()[0])
		if err != nil {
			return nil, err
		}
		return &pbagent.RegisterResponse{Instance: in}, nil
	}
}

// instance is the Instance to write with the registration, a
// compare-and-swap on what was read, and the generation it will have:
// created with cluster when there is none, given cluster when it names
// another, and its status as drain says when the data says left or
// down; as stored otherwise (the batch then writes the registration
// alone). nil (and no error) when there is none and the agent is
// leaving: an Instance an operator removed stays removed.
func (r registrar) instance(ctx context.Context, id *pbresource.ID, cluster string, leaving bool) (*pbresource.Resource, uint64, error) {
	resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true})
	switch {
	case status.Code(err) == codes.NotFound:
		if leaving {
			return nil, 0, nil
		}
		w, err := instanceWrite(&pbresource.Resource{Id: id, Version: resource.CreateOnly}, &pborch.Instance{Cluster: cluster})
		return w, 1, err
	case err != nil:
		return nil, 0, err
	}
	res := resp.GetResource()
	in, err := resource.DecodeData[*pborch.Instance](res)
	if err != nil {
		return nil, 0, err
	}
	// The data is the operator's: what an older store kept of a
	// registration there leaves it.
	next := orchestrator.WithoutRegistration(in)
	if !leaving {
		next.Cluster = cluster
		// A registration ends a "left" or "down" the data holds (older
		// agents and servers wrote them there).
		next.Status = orchestrator.InstanceStatus(false, false, in.GetDrain())
	}
	generation := res.GetGeneration()
	if !proto.Equal(next, in) {
		generation++
	}
	w, err := instanceWrite(res, next)
	return w, generation, err
}

// instanceWrite is in as the data of res, under res's version.
func instanceWrite(res *pbresource.Resource, in *pborch.Instance) (*pbresource.Resource, error) {
	data, err := anypb.New(in)
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: res.GetId(), Owner: res.GetOwner(), Metadata: res.GetMetadata(), Version: res.GetVersion(), Data: data}, nil
}
