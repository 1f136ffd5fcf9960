package orchestrator

import (
	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// DownStatusKey is the status key under which the servers' instance
// controller marks an Instance down (an InstanceDown); it alone writes
// it. The key is the controller's name.
const DownStatusKey = "orchestrator-instance"

// InstanceOf is the Instance as every reader sees it: its data in (what
// the operator set), with its agent's registration (status["agent"] of
// res) overlaid by MergeRegistration, then the servers' verdict that it
// is down (status["orchestrator-instance"]) by MergeInstance. A store
// written before the registration moved to status["agent"] has none,
// and its data reads as before. in is res's data, decoded (a cache's,
// say); it is returned itself when nothing changes it, so the result
// must not be changed.
func InstanceOf(res *pbresource.Resource, in *pborch.Instance) *pborch.Instance {
	in = MergeRegistration(in, RegistrationOf(res))
	st := res.GetStatus()[DownStatusKey]
	if st.GetData() == nil {
		return in
	}
	down := &pborch.InstanceDown{}
	if err := st.GetData().UnmarshalTo(down); err != nil {
		return in
	}
	return MergeInstance(in, down)
}

// DecodeInstance decodes res's data and merges its agent's registration
// and the servers' verdict into it (InstanceOf).
func DecodeInstance(res *pbresource.Resource) (*pborch.Instance, error) {
	in, err := resource.DecodeData[*pborch.Instance](res)
	if err != nil {
		return nil, err
	}
	return InstanceOf(res, in), nil
}

// MergeInstance is the one view of an instance's state, from its data
// and the servers' down verdict (nil: none). The verdict holds over the
// session it judged: while the agent has not registered again, a ready
// or draining instance is down. An instance that left stays left, and
// the verdict's down_since is the instance's whether it holds or not
// (when it was last down). It is pure; it returns in itself when nothing
// changes, else a copy.
func MergeInstance(in *pborch.Instance, down *pborch.InstanceDown) *pborch.Instance {
	if down == nil {
		return in
	}
	holds := down.GetSession() == in.GetSession() && (in.GetStatus() == InstanceReady || in.GetStatus() == InstanceDraining)
	if !holds && proto.Equal(in.GetDownSince(), down.GetDownSince()) {
		return in
	}
	out := proto.Clone(in).(*pborch.Instance)
	out.DownSince = down.GetDownSince()
	if holds {
		out.Status = InstanceDown
	}
	return out
}

// ValidateInstanceDown is the Validate hook of an Instance's
// status["orchestrator-instance"].
func ValidateInstanceDown(m proto.Message) error {
	d, ok := m.(*pborch.InstanceDown)
	if !ok {
		return resource.NewFieldError("", "is not an InstanceDown")
	}
	if d.GetDownSince() == nil {
		return resource.NewFieldError("down_since", "is required")
	}
	return nil
}
