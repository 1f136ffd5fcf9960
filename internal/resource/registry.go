package resource

import (
	"fmt"
	"sort"
	"sync"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// Scope says whether a type's resources live in a namespace.
type Scope int

const (
	// ScopeNamespace resources live in a namespace ("default" when none is
	// given).
	ScopeNamespace Scope = iota
	// ScopeCluster resources have no namespace.
	ScopeCluster
)

// Registration describes a resource type to the resource service.
type Registration struct {
	Type *pbresource.Type
	// Proto is an empty message of the type's data.
	Proto proto.Message
	Scope Scope
	// Validate checks a resource before it is written. Its error should name
	// the field at fault, for example with a FieldError.
	Validate func(*pbresource.Resource) error
	// Mutate fills defaults before validation. It may change res's
	// metadata and replace or re-encode its data (as MutateData does), but
	// must not write into the bytes of res.Data.Value: they are the
	// caller's, and the service keeps what it decoded from them when the
	// hook leaves the data alone.
	Mutate func(*pbresource.Resource) error
	// ValidateUpdate checks a change to a stored resource against what is
	// stored (fields that are fixed once set, transitions that are not
	// allowed). It runs after Validate, on every write that would change
	// the stored resource, and must be pure: it may run again when a write
	// is retried.
	ValidateUpdate func(stored, next *pbresource.Resource) error
	// ValidateOwner, when set, checks a new resource against its owner:
	// data that must agree with the resource that owns it (a service
	// instance of a task names the instance the task runs on). The service
	// calls it when it creates a resource that names an owner, with the
	// owner as stored, or as the same batch writes it; an owner that does
	// not exist (that name with that uid) refuses the create instead
	// (FailedPrecondition). Owners are fixed once a resource is created,
	// so it is not called again on updates. It must be pure: it may run
	// again when a write is retried. Its error should be a FieldError.
	ValidateOwner func(owner, res *pbresource.Resource) error
	// Immutable types refuse any change to a stored resource's data: a
	// change is a new resource (a TaskDefinition revision, say). Metadata
	// may still change.
	Immutable bool
	// WrittenThrough, when set, names the operations through which alone
	// the type is created and changed (the HTTP path people use, e.g.
	// "/v1/environments"): they check and version it beyond what the
	// type's hooks can see. Write and WriteBatch then refuse the type,
	// pointing there, unless the call comes from those operations or the
	// domain's controllers (FromOperations). Such a type is deleted
	// through its operations too: the generic Delete refuses it the same
	// way (see DeletedThrough). Reads and status writes are not affected.
	WrittenThrough string
	// DeletedThrough says, for the generic Delete's refusal of a type
	// written through its operations, how one of its resources is deleted:
	// the operation and its command ("DELETE /v1/environments/{name}
	// (trellis env delete)"), or what deletes it when no call does. Empty,
	// the refusal names WrittenThrough.
	DeletedThrough string
	// DeleteRefusal, when set, gives the generic Delete's refusal of a
	// stored resource of a type written through its operations, when that
	// resource needs another word than DeletedThrough (the active CA root
	// is rotated, never deleted); nil keeps the usual refusal. It sees the
	// stored resource and must be pure. It refines the refusal only: it
	// never runs for a call FromOperations, and never allows a delete.
	DeleteRefusal func(stored *pbresource.Resource) error
	// Sealed types are read and written only by the domain's own code in
	// this process: they hold secrets (the Connect CA's private keys) that
	// the replicated state carries but no API, CLI, log or error may
	// return. Every generic call that names a sealed type, over gRPC, over
	// HTTP or in process, is refused with PermissionDenied unless its
	// context carries FromOperations; lists by owner and watches leave
	// sealed resources out; the HTTP API does not list the type among the
	// known ones. The controller runtime's watches and the owner reaper
	// are in-process code and carry the mark, so a sealed resource is
	// still cached for its domain's controllers and reaped with its owner.
	// The Raft snapshot (GET /v1/snapshot, operator:write) is a backup of
	// the whole state and does hold sealed resources: see
	// docs/architecture.md.
	Sealed bool
	// Permanent types are never deleted through the generic Delete: it
	// refuses them (FailedPrecondition) unless the call is FromOperations.
	// The cluster's identity is one: deleting it would let the next
	// leader's bootstrap mint another.
	Permanent bool
	// ACLs decides who may read, write and list the type. Nil, or a nil
	// hook in it, means the default of DefaultACLHooks: namespace read and
	// write for namespaced types, operator read and write for
	// cluster-scoped ones.
	ACLs *ACLHooks
	// Statuses declares, by status key, who owns the key (StatusOwner)
	// and the typed payload (Status.data) it takes: the state the
	// controller or agent owning the key reports. WriteStatus refuses a
	// declared key to anyone but its owner (CheckStatusOwner), and a
	// payload under a key not declared here, or of another message. A key
	// not declared takes conditions alone, from anyone who may write the
	// resource.
	Statuses map[string]StatusPayload
	// AgentWritten, when set, names the instance whose agent alone may
	// write a resource of the type among agents (a service instance of a
	// task: the instance the task runs on); "" when it is none's. A caller
	// proven to be another instance's agent (AsAgent) is refused the
	// create, change or delete of it (CheckAgentWrite). Callers that are
	// no agent are left to the type's ACLs. It must be pure.
	AgentWritten func(*pbresource.Resource) (string, error)

	// dataTypeURL is the type URL of the data the service stores, set by
	// Register so that a write does not build it.
	dataTypeURL string
}

// StatusPayload declares one status key: its owner and the payload it
// takes.
type StatusPayload struct {
	// Owner is who alone writes the key. Required.
	Owner StatusOwner
	// Proto is an empty message of the payload.
	Proto proto.Message
	// Validate, when set, checks a decoded payload before it is written.
	// Its error should be a FieldError whose field is a path in the
	// payload ("health"); the service reports it under "status.data". It
	// must be pure: it may run again when a write is retried.
	Validate func(proto.Message) error

	// typeURL is the payload's type URL, set by Register.
	typeURL string
}

// ACLHooks are the authorization hooks of a type. Each returns an error
// wrapping acl.ErrPermissionDenied to refuse.
type ACLHooks struct {
	Read  func(acl.Authorizer, *pbresource.ID) error
	Write func(acl.Authorizer, *pbresource.Resource) error
	List  func(acl.Authorizer, *pbresource.Tenancy) error
}

// Registry holds the registered types.
type Registry struct {
	mu    sync.RWMutex
	types map[typeKey]Registration
}

// typeKey identifies a type in the registry without building a string on
// every lookup.
type typeKey struct{ group, version, kind string }

func keyOf(t *pbresource.Type) typeKey {
	return typeKey{t.GetGroup(), t.GetGroupVersion(), t.GetKind()}
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{types: make(map[typeKey]Registration)}
}

// Register adds a type. Registering a type twice, or without a proto
// message, is a programming error and panics.
func (r *Registry) Register(reg Registration) {
	if reg.Type == nil || reg.Type.GetGroup() == "" || reg.Type.GetGroupVersion() == "" || reg.Type.GetKind() == "" {
		panic("resource: registration needs a full type")
	}
	if reg.Proto == nil {
		panic(fmt.Sprintf("resource: %s registered without a proto message", ids.TypeString(reg.Type)))
	}
	if len(reg.Statuses) > 0 {
		statuses := make(map[string]StatusPayload, len(reg.Statuses))
		for k, p := range reg.Statuses {
			if err := ValidateQualifiedName("key", k); err != nil || p.Proto == nil {
				panic(fmt.Sprintf("resource: %s declares status key %q without a valid name and a proto message", ids.TypeString(reg.Type), k))
			}
			if !p.Owner.valid() {
				panic(fmt.Sprintf("resource: %s declares status key %q without one owner (a controller, or the agent of an instance)", ids.TypeString(reg.Type), k))
			}
			p.typeURL = typeURLOf(p.Proto)
			statuses[k] = p
		}
		reg.Statuses = statuses
	}
	key := keyOf(reg.Type)
	reg.dataTypeURL = typeURLOf(reg.Proto)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.types[key]; ok {
		panic(fmt.Sprintf("resource: %s registered twice", ids.TypeString(reg.Type)))
	}
	r.types[key] = reg
}

func typeURLOf(m proto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

// Resolve returns the registration of a type.
func (r *Registry) Resolve(typ *pbresource.Type) (Registration, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	reg, ok := r.types[keyOf(typ)]
	return reg, ok
}

// Types returns every registration, ordered by type string.
func (r *Registry) Types() []Registration {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Registration, 0, len(r.types))
	for _, reg := range r.types {
		out = append(out, reg)
	}
	sort.Slice(out, func(i, j int) bool {
		return ids.TypeString(out[i].Type) < ids.TypeString(out[j].Type)
	})
	return out
}
