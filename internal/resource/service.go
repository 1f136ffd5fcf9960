package resource

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"time"
	"trellis.dev/trellis/internal/acl"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// Config configures a Service.
type Config struct {
	// Backend stores the resources. Required.
	Backend storage.Backend
	// Registry holds the types the service accepts. Required.
	Registry *Registry
	// Authorize returns the authorizer of the caller whose token
	// TokenFromContext(ctx) returns. Nil allows everything (acl.AllowAll).
	// Refusals should wrap acl.ErrPermissionDenied (reported as
	// PermissionDenied); an error that already is a gRPC status error keeps
	// its code; any other error is reported as Internal.
	Authorize func(ctx context.Context) (acl.Authorizer, error)
	// Logger receives the internal errors that callers are not shown.
	// Nil discards them.
	Logger *slog.Logger
	// Now is the clock that timestamps new uids. Nil means time.Now.
	Now func() time.Time
}

// CreateOnly is the version a write carries to create a resource and
// nothing else: it fails with a conflict (Aborted, HTTP 409) when the
// resource exists. Stored versions are Raft indexes, never "0" (etcd's
// txn compare on mod_revision 0 means the same).
const CreateOnly = "0"

// Limits on the work one request may ask for.
const (
	// MaxBatchMembers is the most resources one WriteBatch may hold.
	MaxBatchMembers = 5000
	// MaxBatchSize is the largest total encoded size of a WriteBatch.
	MaxBatchSize = 8 << 20
	// maxWriteAttempts bounds the read-CAS-retry loop of an upsert; the
	// pauses between attempts (conflictPause) add up to about half a
	// second at most.
	maxWriteAttempts = 12
)

// Service is the resource service. It implements API for in-process callers
// and pbresource.ResourceServiceServer for gRPC; both faces run the same
// code. See the package comment for the rules it enforces.
type Service struct {
	// UnsafeResourceServiceServer holds only the generated marker method;
	// every RPC is implemented below, so nothing falls through to an
	// "unimplemented" default.
	pbresource.UnsafeResourceServiceServer

	backend   storage.Backend
	registry  *Registry
	authorize func(ctx context.Context) (acl.Authorizer, error)
	now       func() time.Time
	errs      errorMapper

	uidMu      sync.Mutex
	uidEntropy *ulid.MonotonicEntropy
}

var (
	_ API                              = (*Service)(nil)
	_ pbresource.ResourceServiceServer = (*Service)(nil)
	_ storage.Watch                    = (*filteredWatch)(nil)
)

func allowAll(context.Context) (acl.Authorizer, error) { return acl.AllowAll{}, nil }

// NewService returns a Service. It panics when Backend or Registry is
// missing, a programming error.
func NewService(cfg Config) *Service {
	if cfg.Backend == nil || cfg.Registry == nil {
		panic("resource: NewService needs a Backend and a Registry")
	}
	s := &Service{
		backend:    cfg.Backend,
		registry:   cfg.Registry,
		authorize:  cfg.Authorize,
		now:        cfg.Now,
		errs:       errorMapper{log: cfg.Logger},
		uidEntropy: ulid.Monotonic(rand.Reader, 0),
	}
	if s.authorize == nil {
		s.authorize = allowAll
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.errs.log == nil {
		s.errs.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// callerContext returns ctx carrying the caller's token: the one an
// in-process caller attached with ContextWithToken or, for a gRPC call, the
// one in the TokenMetadataKey metadata.
func callerContext(ctx context.Context) context.Context {
	if TokenFromContext(ctx) != "" {
		return ctx
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	if v := md.Get(TokenMetadataKey); len(v) > 0 && v[0] != "" {
		return ContextWithToken(ctx, v[0])
	}
	return ctx
}

// authorizer resolves the caller's authorizer.
func (s *Service) authorizer(ctx context.Context) (acl.Authorizer, error) {
	a, err := s.authorize(callerContext(ctx))
	if err != nil {
		return nil, aclError("resolve the caller's token", err)
	}
	if a == nil {
		return nil, errors.New("the ACL hook returned no authorizer")
	}
	return a, nil
}

// newUID returns a fresh ULID. Monotonic entropy keeps the uids made within
// one millisecond ordered; it is not safe for concurrent use, hence the lock.
func (s *Service) newUID() (string, error) {
	s.uidMu.Lock()
	defer s.uidMu.Unlock()
	id, err := ulid.New(ulid.Timestamp(s.now()), s.uidEntropy)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// clone copies a stored resource before it leaves the service: the backend
// shares its copies with the store, and a caller changing one must not
// change the store.
func clone(res *pbresource.Resource) *pbresource.Resource {
	if res == nil {
		return nil
	}
	return proto.Clone(res).(*pbresource.Resource)
}

func cloneAll(in []*pbresource.Resource) []*pbresource.Resource {
	out := make([]*pbresource.Resource, len(in))
	for i, r := range in {
		out[i] = clone(r)
	}
	return out
}
