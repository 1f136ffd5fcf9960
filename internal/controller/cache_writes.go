package controller

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// SeeingWrites returns api with its writes applied to the cache as soon
// as the store answers them, before the watch brings them back: a
// controller whose next run must see what this one wrote (placements,
// which the next run of another environment publishing the same host
// port must not take again) writes through it, and reads its own writes
// from the cache without keeping them, or applying them, by hand.
//
// What is applied is what the store answered, filed and derived like a
// watched event (types not cached are passed over):
//
//   - the resources a Write, WriteBatch (its resources and those its
//     status entries left), WriteStatus or WriteStatuses answered (each
//     member of WriteStatuses that was not refused);
//   - the deletion of the incarnation a Delete named by its uid, when it
//     succeeded or found nothing there. A Delete refused as stale
//     (Aborted) is not applied: the store holds a newer version than the
//     one the caller read, which the watch brings, and dropping it from
//     the cache meanwhile would lose it until its next change. A Delete
//     naming no uid is left to the watch.
//
// The watch then brings the same writes back: the cache takes each as the
// repeat it is (the same version) and only the controller's mappers see
// it, as they see every change. Nothing applied is rolled back by an
// older event still on its way: not an upsert (an older version is
// ignored), nor a deletion (the cache remembers the deleted incarnation
// until the watch brings its deletion, and ignores an upsert of it
// meanwhile: a uid is never written again once deleted).
func (c *Cache) SeeingWrites(api resource.API) resource.API {
	return seeingWrites{API: api, cache: c}
}

type seeingWrites struct {
	resource.API
	cache *Cache
}

func (s seeingWrites) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	out, err := s.API.Write(ctx, req)
	if err == nil {
		s.cache.applyFrom(Event{Resource: out.GetResource()}, fromWrite)
	}
	return out, err
}

func (s seeingWrites) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	out, err := s.API.WriteBatch(ctx, req)
	if err == nil {
		for _, res := range out.GetResources() {
			s.cache.applyFrom(Event{Resource: res}, fromWrite)
		}
		for _, res := range out.GetStatuses() {
			s.cache.applyFrom(Event{Resource: res}, fromWrite)
		}
	}
	return out, err
}

func (s seeingWrites) WriteStatus(ctx context.Context, req *pbresource.WriteStatusRequest) (*pbresource.WriteStatusResponse, error) {
	out, err := s.API.WriteStatus(ctx, req)
	if err == nil {
		s.cache.applyFrom(Event{Resource: out.GetResource()}, fromWrite)
	}
	return out, err
}

func (s seeingWrites) WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	out, err := s.API.WriteStatuses(ctx, req)
	if err == nil {
		for _, r := range out.GetResults() {
			if r.GetError() == nil {
				s.cache.applyFrom(Event{Resource: r.GetResource()}, fromWrite)
			}
		}
	}
	return out, err
}

func (s seeingWrites) Delete(ctx context.Context, req *pbresource.DeleteRequest) (*pbresource.DeleteResponse, error) {
	out, err := s.API.Delete(ctx, req)
	if (err == nil || status.Code(err) == codes.NotFound) && req.GetId().GetUid() != "" {
		s.cache.applyFrom(Event{Resource: &pbresource.Resource{Id: req.GetId()}, Deleted: true}, fromWrite)
	}
	return out, err
}
