package resource

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// Every status key a type declares (Registration.Statuses) has one owner:
// a controller of the servers, or the agent of the instance the resource
// is on. WriteStatus and WriteStatuses refuse a declared key to anyone
// else with PermissionDenied, naming the owner, and write nothing; keys a
// type does not declare (a user's own controller's conditions) stay
// writable by whoever may write the resource.
//
// Who the caller is comes from the context, never from the request:
//
//   - A controller marks its context with AsController. It is an
//     in-process value: a gRPC or HTTP request cannot carry it. The
//     controller runtime sets it for every reconcile, and a domain's own
//     code that writes its status outside a reconcile sets it itself.
//   - An agent is proven at the server's edge: by its Connect leaf
//     (spiffe://<td>/agent/client/dc/<dc>/id/<instance>) verified at the
//     TLS handshake of the public port, or by the session its Instance
//     holds; the edge then marks the context with AsAgent. See
//     internal/server's agent identity and docs/architecture.md.

// The gRPC metadata by which an agent without a Connect leaf names itself
// on the public port: its instance and the session its Instance holds.
// The server's edge checks the pair against the store before it takes
// the caller for that agent (AsAgent); a pair that does not hold proves
// nothing.
const (
	AgentInstanceMetadataKey = "x-trellis-agent-instance"
	AgentSessionMetadataKey  = "x-trellis-agent-session"
)

// StatusOwner says who writes a status key. Exactly one field is set.
type StatusOwner struct {
	// Controller is the name of the servers' controller that writes the
	// key (controller.Controller.Name).
	Controller string
	// AgentOf makes the key the agent's: it names the instance whose
	// agent alone writes the key, from the stored resource (for a Task,
	// the instance it is placed on); "" when the resource is on none, and
	// then nobody may write the key.
	AgentOf func(*pbresource.Resource) (string, error)
}

// String says who the owner is, as refusals name it.
func (o StatusOwner) String() string {
	if o.Controller != "" {
		return fmt.Sprintf("the servers' controller %q", o.Controller)
	}
	return "the agent of the instance the resource is on"
}

func (o StatusOwner) valid() bool { return (o.Controller != "") != (o.AgentOf != nil) }

// StatusWriter is who asks to write a status, as the context says.
type StatusWriter struct {
	// Controller is the name of the in-process controller writing
	// (AsController); "" for any other caller.
	Controller string
	// Agent is the instance whose agent the caller was proven to be
	// (AsAgent); "" when it proved none.
	Agent string
}

// String names the writer in refusals.
func (w StatusWriter) String() string {
	switch {
	case w.Controller != "":
		return fmt.Sprintf("the controller %q", w.Controller)
	case w.Agent != "":
		return "the agent of instance " + w.Agent
	}
	return "a caller that is neither a controller of the servers nor a proven agent"
}

type controllerKey struct{}
type agentKey struct{}

// AsController marks ctx as a call from the servers' controller name, the
// owner of the status keys that name it. Only code in this process can
// set it.
func AsController(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, controllerKey{}, name)
}

// AsAgent marks ctx as a call from the agent of instance, proven by the
// caller of AsAgent (the server's gRPC edge, which checked the agent's
// certificate or session). Only code in this process can set it.
func AsAgent(ctx context.Context, instance string) context.Context {
	return context.WithValue(ctx, agentKey{}, instance)
}

// StatusWriterOf is who ctx says is calling.
func StatusWriterOf(ctx context.Context) StatusWriter {
	c, _ := ctx.Value(controllerKey{}).(string)
	a, _ := ctx.Value(agentKey{}).(string)
	return StatusWriter{Controller: c, Agent: a}
}

// CheckStatusOwner decides whether w may write key of a resource of reg's
// type: nil when the key is not declared (any writer of the resource
// may) or w is its owner, else a PermissionDenied error naming the owner.
// stored is the resource as stored; nil when none is, which an agent's
// key needs (to know the instance) and a controller's does not: with
// nothing stored nothing is written, and the write fails as not found.
// It is pure.
func CheckStatusOwner(w StatusWriter, reg Registration, key string, stored *pbresource.Resource) error {
	decl, ok := reg.Statuses[key]
	if !ok {
		return nil
	}
	owner := decl.Owner
	what := fmt.Sprintf("status key %q of %s", key, ids.TypeString(reg.Type))
	if owner.Controller != "" {
		if w.Controller == owner.Controller {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s is written only by its owner, %s; %s may not write it", what, owner, w)
	}
	if owner.AgentOf == nil {
		return status.Errorf(codes.PermissionDenied, "%s declares no owner, so nobody may write it", what)
	}
	if stored == nil {
		return nil
	}
	instance, err := owner.AgentOf(stored)
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "%s is written only by the agent of the instance %s is on, which cannot be told: %v", what, stored.GetId().GetName(), err)
	}
	if instance == "" {
		return status.Errorf(codes.PermissionDenied, "%s is written only by the agent of the instance %s is on, and it is on none", what, stored.GetId().GetName())
	}
	if w.Agent == instance {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s of %s is written only by its owner, the agent of instance %s; %s may not write it", what, stored.GetId().GetName(), instance, w)
}

// CheckAgentWrite decides whether w may create, change or delete res, a
// resource of reg's type, as far as agents go: nil unless the type names
// the agent that writes it (Registration.AgentWritten), w is a proven
// agent, and res is another instance's; then PermissionDenied, naming
// both. For a change, res is the resource as it would be written (a type
// that sets AgentWritten keeps the instance it names fixed); for a
// delete, as stored. It is pure.
func CheckAgentWrite(w StatusWriter, reg Registration, res *pbresource.Resource) error {
	if reg.AgentWritten == nil || w.Agent == "" {
		return nil
	}
	instance, err := reg.AgentWritten(res)
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "%s is written only by the agent of the instance it is on, which cannot be told: %v", ids.String(res.GetId()), err)
	}
	if instance == "" || instance == w.Agent {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s is on instance %s: only that instance's agent writes it among agents; %s may not", ids.String(res.GetId()), instance, w)
}
