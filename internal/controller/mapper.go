package controller

import (
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// MapSelf maps a change to the changed resource itself. It is the mapper of
// a controller's managed type unless the controller names another.
func MapSelf(ev Event, _ Lookup) []Request {
	if ev.Resource.GetId() == nil {
		return nil
	}
	return []Request{{ID: nameOnly(ev.Resource.GetId())}}
}

// MapOwner maps a change to the changed resource's owner, for controllers
// that manage the owner (a deployment that watches its tasks). A resource
// without an owner maps to nothing.
func MapOwner(ev Event, _ Lookup) []Request {
	owner := ev.Resource.GetOwner()
	if owner == nil {
		return nil
	}
	return []Request{{ID: nameOnly(owner)}}
}

// MapReferencing maps a change to the managed resources whose
// Controller.References name the changed one (the tasks placed on an
// instance that went away).
func MapReferencing(ev Event, look Lookup) []Request {
	ids := look.Referencing(ev.Resource.GetId())
	if len(ids) == 0 {
		return nil
	}
	out := make([]Request, len(ids))
	for i, id := range ids {
		out[i] = Request{ID: id}
	}
	return out
}

// nameOnly returns a copy of id without its uid.
func nameOnly(id *pbresource.ID) *pbresource.ID {
	c := proto.Clone(id).(*pbresource.ID)
	c.Uid = ""
	return c
}
