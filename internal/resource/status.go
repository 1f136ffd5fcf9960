package resource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Limits on a status.
const (
	MaxConditions             = 64
	MaxConditionReasonLength  = 256
	MaxConditionMessageLength = 32 << 10
)

// WriteStatus sets one key's entry of a resource's status: conditions and
// the typed payload the key declares. It never changes data, metadata or
// generation. The status write is the only way to change status: Write
// carries the stored status over. With a version it is a CAS; without, it
// applies to whatever is stored, re-reading and retrying when a concurrent
// write wins, since a key's owner competes with nobody for it.
func (s *Service) WriteStatus(ctx context.Context, req *pbresource.WriteStatusRequest) (*pbresource.WriteStatusResponse, error) {
	out, err := s.writeStatus(ctx, req)
	if err != nil {
		return nil, s.errs.toStatus("write status", err)
	}
	return &pbresource.WriteStatusResponse{Resource: clone(out)}, nil
}

func (s *Service) writeStatus(ctx context.Context, req *pbresource.WriteStatusRequest) (*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.registry.checkSealedType(ctx, req.GetId().GetType()); err != nil {
		return nil, err
	}
	e, err := s.registry.prepareStatus(-1, req)
	if err != nil {
		return nil, err
	}
	e.writer = StatusWriterOf(ctx)
	consistency := storage.EventualConsistency
	for attempt := range maxWriteAttempts {
		p, err := s.planStatusWithRead(ctx, consistency, a, e)
		if err != nil {
			return nil, err
		}
		if p.refusal != nil {
			return nil, p.refusal
		}
		if p.write == nil {
			return p.stored, nil
		}
		out, err := s.backend.WriteCAS(ctx, p.write)
		if err == nil {
			return out, nil
		}
		if !isConflict(err) {
			return nil, err
		}
		consistency = storage.StrongConsistency
		if err := conflictPause(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, status.Errorf(codes.Aborted, "gave up after %d attempts: concurrent writes kept changing the resource; retry", maxWriteAttempts)
}

// statusEntry is one status write, checked: what the caller asks to store
// under one key, before it meets the stored resource.
type statusEntry struct {
	// member is the index in a WriteStatuses request, -1 for WriteStatus.
	member int
	reg    Registration
	// id has its namespace filled in; its uid is as the caller gave it.
	id      *pbresource.ID
	version string
	key     string
	// status is the caller's, with its payload in canonical encoding.
	status *pbresource.Status
	// writer is who asks (StatusWriterOf the request's context).
	writer StatusWriter
	// authorized is set once the Write hook and the key's owner check
	// allowed the entry.
	authorized bool
	// onMember is, for a batch's status entry on a resource the batch
	// also writes, the index of that member; -1 otherwise.
	onMember int
}

// prepareStatusMember checks member i of a request that writes several
// statuses (WriteStatuses, a batch's status entries): its type is not
// sealed, the entry is well formed; writer is who asks to write it.
func (s *Service) prepareStatusMember(ctx context.Context, i int, m *pbresource.WriteStatusRequest, writer StatusWriter) (*statusEntry, error) {
	if err := s.registry.checkSealedType(ctx, m.GetId().GetType()); err != nil {
		return nil, withPrefix(statusMemberField(i), err)
	}
	e, err := s.registry.prepareStatus(i, m)
	if err != nil {
		return nil, err
	}
	e.writer = writer
	return e, nil
}

// prepareStatus checks everything of a status request that needs no read:
// the id, the key, the conditions and the payload. member is the index of
// a WriteStatuses member, -1 for WriteStatus; a refusal names its field
// under the member ("statuses[2].status.data: ...").
func (r *Registry) prepareStatus(member int, req *pbresource.WriteStatusRequest) (*statusEntry, error) {
	e, err := r.checkStatusRequest(req)
	if err != nil {
		if member >= 0 {
			return nil, withPrefix(statusMemberField(member), err)
		}
		return nil, err
	}
	e.member = member
	return e, nil
}

func (r *Registry) checkStatusRequest(req *pbresource.WriteStatusRequest) (*statusEntry, error) {
	id, reg, err := r.checkID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	if err := ValidateQualifiedName("key", req.GetKey()); err != nil {
		return nil, err
	}
	st, err := r.checkStatus(reg, req.GetKey(), req.GetStatus())
	if err != nil {
		return nil, err
	}
	return &statusEntry{reg: reg, id: id, version: req.GetVersion(), key: req.GetKey(), status: st, onMember: -1}, nil
}

// statusPlan is what to do for one status entry given the stored resource.
type statusPlan struct {
	// stored is the resource as read; nil when none is stored.
	stored *pbresource.Resource
	// write is what to hand the backend; nil when the stored status under
	// the key is already the requested one, or the entry is refused.
	write *pbresource.Resource
	// refusal is why the entry cannot be written against what is stored:
	// gone, a version or uid that is not the stored one, a generation not
	// yet reached, a resource over the size limit. In a WriteStatuses it
	// fails only its member.
	refusal error
}

// planStatusWithRead reads the resource an entry names, authorizes the
// entry against it once, and plans the entry. As for Write, a plan that
// would not write (a refusal, or nothing to change) is confirmed with a
// strong read first, since no CAS would catch a stale read there. Its error
// is one the whole request fails with: the store's, or the ACL hook's.
func (s *Service) planStatusWithRead(ctx context.Context, consistency storage.ReadConsistency, a acl.Authorizer, e *statusEntry) (statusPlan, error) {
	for {
		stored, err := s.readCurrent(ctx, consistency, e.id)
		if err != nil {
			return statusPlan{}, err
		}
		if stored == nil && consistency == storage.EventualConsistency {
			consistency = storage.StrongConsistency
			continue
		}
		if !e.authorized {
			// The Write hook sees the stored resource, or only the id when
			// there is none (which it must not learn before it is allowed).
			target := stored
			if target == nil {
				target = &pbresource.Resource{Id: e.id}
			}
			if err := s.authorizeWrite(a, e.reg, target); err != nil {
				return statusPlan{}, err
			}
			// Then the key's owner: a refusal fails the whole request, as
			// the ACL hook's does, before anything is written.
			if err := CheckStatusOwner(e.writer, e.reg, e.key, stored); err != nil {
				return statusPlan{}, err
			}
			e.authorized = true
		}
		p := statusPlan{stored: stored}
		if stored == nil {
			p.refusal = fmt.Errorf("%s: %w", ids.String(e.id), storage.ErrNotFound)
		} else {
			p.write, p.refusal = planStatus(e, stored)
		}
		if (p.refusal != nil || p.write == nil) && consistency == storage.EventualConsistency {
			consistency = storage.StrongConsistency
			continue
		}
		return p, nil
	}
}

// planStatus decides the resource to write for a status entry, or nil
// when the stored status under the key is already the requested one. It
// is pure.
func planStatus(e *statusEntry, stored *pbresource.Resource) (*pbresource.Resource, error) {
	name := ids.String(e.id)
	if uid := e.id.GetUid(); uid != "" && uid != stored.GetId().GetUid() {
		return nil, status.Errorf(codes.Aborted, "id.uid: %s now has uid %s, not %s: it was deleted and re-created; re-read it and retry", name, stored.GetId().GetUid(), uid)
	}
	if v := e.version; v != "" && v != stored.GetVersion() {
		return nil, status.Errorf(codes.Aborted, "version: conflict: %s is at version %s, not %s; re-read it and retry", name, stored.GetVersion(), v)
	}
	if og, g := e.status.GetObservedGeneration(), stored.GetGeneration(); og > g {
		return nil, NewFieldError("status.observed_generation", "%d is ahead of the resource's generation %d", og, g)
	}
	if proto.Equal(stored.GetStatus()[e.key], e.status) {
		return nil, nil
	}
	w := &pbresource.Resource{
		Id:         stored.GetId(),
		Owner:      stored.GetOwner(),
		Version:    stored.GetVersion(),
		Generation: stored.GetGeneration(),
		Metadata:   stored.GetMetadata(),
		Data:       stored.GetData(),
		Status:     make(map[string]*pbresource.Status, len(stored.GetStatus())+1),
	}
	maps.Copy(w.Status, stored.GetStatus())
	w.Status[e.key] = e.status
	if err := checkSize(w); err != nil {
		return nil, err
	}
	return w, nil
}

// checkStatus validates a status's conditions and payload, and returns the
// status to store: the caller's, with the payload in canonical encoding.
func (r *Registry) checkStatus(reg Registration, key string, st *pbresource.Status) (*pbresource.Status, error) {
	if st == nil {
		return nil, NewFieldError("status", "is required")
	}
	if n := len(st.GetConditions()); n > MaxConditions {
		return nil, NewFieldError("status.conditions", "has %d conditions, over the limit of %d", n, MaxConditions)
	}
	for i, c := range st.GetConditions() {
		field := fmt.Sprintf("status.conditions[%d]", i)
		if c == nil {
			return nil, NewFieldError(field, "is empty")
		}
		if err := ValidateQualifiedName(field+".type", c.GetType()); err != nil {
			return nil, err
		}
		if _, known := pbresource.State_name[int32(c.GetState())]; !known {
			return nil, NewFieldError(field+".state", "%d is not a known state", int32(c.GetState()))
		}
		if len(c.GetReason()) > MaxConditionReasonLength || !utf8.ValidString(c.GetReason()) {
			return nil, NewFieldError(field+".reason", "must be valid UTF-8 of at most %d bytes", MaxConditionReasonLength)
		}
		if len(c.GetMessage()) > MaxConditionMessageLength || !utf8.ValidString(c.GetMessage()) {
			return nil, NewFieldError(field+".message", "must be valid UTF-8 of at most %d bytes", MaxConditionMessageLength)
		}
		if c.GetResource() != nil {
			if _, _, err := r.checkID(field+".resource", c.GetResource()); err != nil {
				return nil, err
			}
		}
	}
	if st.GetData() == nil {
		return st, nil
	}
	data, err := checkPayload(reg, key, st.GetData())
	if err != nil {
		return nil, err
	}
	return &pbresource.Status{ObservedGeneration: st.GetObservedGeneration(), Conditions: st.GetConditions(), Data: data}, nil
}

// checkPayload checks a status payload against what its key declares,
// runs the key's Validate hook, and returns the payload in the canonical
// (deterministic) encoding, so that an identical status is recognized as
// such and not written again.
func checkPayload(reg Registration, key string, data *anypb.Any) (*anypb.Any, error) {
	const field = "status.data"
	decl, ok := reg.Statuses[key]
	if !ok {
		return nil, NewFieldError(field, "status key %q of %s takes no data (%s)", key, ids.TypeString(reg.Type), declaredKeys(reg))
	}
	want := decl.Proto.ProtoReflect().Descriptor().FullName()
	if data.MessageName() != want {
		return nil, NewFieldError(field, "has type %q; status key %q of %s takes a %s", data.GetTypeUrl(), key, ids.TypeString(reg.Type), want)
	}
	msg := decl.Proto.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(data.GetValue(), msg); err != nil {
		return nil, NewFieldError(field, "does not decode as %s: %v", want, err)
	}
	if decl.Validate != nil {
		if err := decl.Validate(msg); err != nil {
			var fe *FieldError
			if _, isStatus := status.FromError(err); errors.As(err, &fe) || isStatus {
				return nil, withPrefix(field, err)
			}
			return nil, NewFieldError(field, "is invalid: %v", err)
		}
	}
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, NewFieldError(field, "cannot be encoded: %v", err)
	}
	return &anypb.Any{TypeUrl: decl.typeURL, Value: value}, nil
}

// declaredKeys lists the status keys of a type that take data, for an
// error message.
func declaredKeys(reg Registration) string {
	if len(reg.Statuses) == 0 {
		return "it declares no status data"
	}
	keys := slices.Sorted(maps.Keys(reg.Statuses))
	return "it declares data for " + strings.Join(keys, ", ")
}
