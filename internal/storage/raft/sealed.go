package raft

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Sealed types on the server-to-server port.
//
// A sealed type (Config.Sealed; the Connect CA's signing keys) is in the
// replicated state so that every server holds it, and its own server's
// code reads it there. The forwarding service reads anything by id for a
// follower, and so would hand a private key to whatever reached the
// server port as a server. It refuses sealed types instead
// (PermissionDenied, naming the type), and a follower never asks it for
// them: its strong read of a sealed type asks the leader only for its
// read index (ReadIndex, which carries no data), waits until its own
// state machine has applied that index, and reads its own store, which is
// then as current as the leader's was when asked (the read-index read of
// the Raft paper, §6.4). Reads of other types are still forwarded: one
// round trip, where the read-index read may also wait for the follower to
// learn that the last write committed (up to the commit timeout).
//
// A user snapshot (Snapshot) still holds sealed resources: a restore must
// bring the CA's keys back with the rest (docs/cluster.md says how the
// file is kept).

// sealed reports whether typ is sealed for this backend.
func (b *Backend) sealed(typ *pbresource.Type) bool {
	return b.cfg.Sealed != nil && b.cfg.Sealed(typ)
}

// sealedForwardError is the forwarding service's refusal of a read of a
// sealed type. It is a gRPC status, not an in-band storage error: no
// state of the cluster makes the call allowed, so it is a matter of
// authority, and a follower that sent it (an older version) must not
// take it for a retryable one.
func sealedForwardError(method string, typ *pbresource.Type) error {
	return status.Errorf(codes.PermissionDenied,
		"Forwarding.%s: %s is sealed: it holds secrets that never leave a server by a read; a server reads it from its own store (a follower after a read-index barrier)",
		method, ids.TypeString(typ))
}

// readIndexed runs read on this follower's own store once it has applied
// the leader's read index: a strong read that carries no data over the
// wire.
func readIndexed[T any](ctx context.Context, b *Backend, conn *grpc.ClientConn, read func() (T, error)) (T, error) {
	var zero T
	start := time.Now()
	defer func() { b.metrics.forward.WithLabelValues("read_indexed").Observe(time.Since(start).Seconds()) }()
	idx, err := b.readIndexRemote(ctx, conn)
	if err != nil {
		return zero, err
	}
	if err := b.awaitApplied(ctx, idx); err != nil {
		return zero, err
	}
	return read()
}

// awaitApplied waits, up to the hold timeout, until this server's state
// machine has applied idx.
func (b *Backend) awaitApplied(ctx context.Context, idx uint64) error {
	hold := time.NewTimer(b.tuning.HoldTimeout)
	defer hold.Stop()
	switch err := b.pollUntil(func() bool { return b.fsm.applied.Load() >= idx }, hold.C, ctx.Done()); err {
	case nil:
		return nil
	case errPollDeadline:
		return fmt.Errorf("%w (this server has not applied the leader's read index %d within %s: it is at %d)",
			storage.ErrUnavailable, idx, b.tuning.HoldTimeout, b.fsm.applied.Load())
	case errPollDone:
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
	default:
		return err
	}
}
