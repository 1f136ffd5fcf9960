package camodule

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
)

// prune deletes the roots that ca.RootsToPrune names at the manager's
// now, each with its signing key, and returns their ids and when the next
// one is due (ca.NextPruneAt). The key goes first: a key without its root
// signs nothing (only the active root's key signs), while a root whose
// key is gone could not be rotated back to; a failure between the two
// deletes leaves the root, which the next reconcile deletes. The root is
// deleted at the version listed, so a root changed meanwhile is kept.
func (m *Manager) prune(ctx context.Context, cfg *pbca.CAConfig, roots []storedRoot) ([]string, time.Time, error) {
	now := m.now()
	leafTTL := cfg.GetLeafTtl().AsDuration()
	states := make([]ca.RootState, len(roots))
	byID := make(map[string]storedRoot, len(roots))
	for i, r := range roots {
		states[i] = ca.RootState{ID: r.root.GetId(), Active: r.root.GetActive(), NotAfter: r.root.GetNotAfter().AsTime(),
			LeafTTL: r.root.GetMaxLeafTtl().AsDuration()}
		if r.root.GetRotatedOutAt().IsValid() {
			states[i].RotatedOutAt = r.root.GetRotatedOutAt().AsTime()
		}
		byID[r.root.GetId()] = r
	}
	var pruned []string
	for _, id := range ca.RootsToPrune(states, leafTTL, now) {
		r := byID[id]
		name := r.res.GetId().GetName()
		if _, err := m.API.Delete(ctx, &pbresource.DeleteRequest{Id: ca.SigningKeyID(name)}); err != nil {
			return pruned, time.Time{}, fmt.Errorf("prune the root %s: delete its signing key: %w", id, err)
		}
		if _, err := m.API.Delete(ctx, &pbresource.DeleteRequest{Id: r.res.GetId(), Version: r.res.GetVersion()}); err != nil {
			return pruned, time.Time{}, fmt.Errorf("prune the root %s: %w", id, err)
		}
		pruned = append(pruned, id)
		m.log().Info("pruned a CA root rotated out", "root_id", id, "rotated_out_at", r.root.GetRotatedOutAt().AsTime(),
			"leaf_ttl", max(leafTTL, r.root.GetMaxLeafTtl().AsDuration()))
	}
	return pruned, ca.NextPruneAt(states, leafTTL, now), nil
}

// recordLeafTTL raises the active root's max_leaf_ttl to the leaf_ttl in
// force when that is longer, at the version listed: pruning waits for the
// longest-lived leaf the root can have signed, even if leaf_ttl is lowered
// later. It returns whether it wrote.
func (m *Manager) recordLeafTTL(ctx context.Context, cfg *pbca.CAConfig, active *storedRoot) (bool, error) {
	leafTTL := cfg.GetLeafTtl().AsDuration()
	if active.root.GetMaxLeafTtl().AsDuration() >= leafTTL {
		return false, nil
	}
	next := proto.Clone(active.root).(*pbca.CARoot)
	next.MaxLeafTtl = durationpb.New(leafTTL)
	data, err := anypb.New(next)
	if err != nil {
		return false, err
	}
	if _, err := m.API.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: active.res.GetId(), Version: active.res.GetVersion(), Data: data,
	}}); err != nil {
		return false, fmt.Errorf("record leaf_ttl %s on the active root %s: %w", leafTTL, active.root.GetId(), err)
	}
	return true, nil
}
