package camodule

import (
	"context"
	"net/http"
	"strconv"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
)

// A blocking read of the roots: GET /v1/ca/roots?index=N&wait=D answers
// once the roots have changed after the store index N, or when D has
// passed, whichever comes first; every answer carries in IndexHeader the
// index its roots are as of, which the next request passes as index. A
// client (a proxy, an agent's leaf cache) so follows the roots with one
// open request at a time and no polling. It rides on the resource
// service's watch from an index, so it sees exactly the changes of the
// roots, not of the rest of the store.

// IndexHeader is the header of the store index an answer of
// /v1/ca/roots is as of.
const IndexHeader = "X-Trellis-Index"

// Bounds of ?wait: how long a blocking read waits when it names no wait,
// and at most.
const (
	DefaultRootsWait = 5 * time.Minute
	MaxRootsWait     = 10 * time.Minute
)

// blockingParams reads ?index and ?wait: no index (or 0) answers at once;
// wait needs an index and is at most MaxRootsWait.
func blockingParams(r *http.Request) (uint64, time.Duration, error) {
	p, err := httpapi.Params(r, "index", "wait")
	if err != nil {
		return 0, 0, err
	}
	var index uint64
	if v := p["index"]; v != "" {
		if index, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, 0, httpapi.InputError("index", "must be a non-negative integer (the %s of an earlier answer), got %q", IndexHeader, v)
		}
	}
	wait := DefaultRootsWait
	if v := p["wait"]; v != "" {
		if index == 0 {
			return 0, 0, httpapi.InputError("wait", "waits for a change after an index: give index too (the %s of an earlier answer)", IndexHeader)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, 0, httpapi.InputError("wait", "%q is not a positive duration (such as 30s or 5m)", v)
		}
		if d > MaxRootsWait {
			return 0, 0, httpapi.InputError("wait", "%s is over the longest wait, %s", d, MaxRootsWait)
		}
		wait = d
	}
	return index, wait, nil
}

// waitForRoots returns once a root was written or deleted after index,
// when wait has passed, or at once when the store no longer holds the
// changes since index, or the server begins to shut down (the caller
// then reads the roots as they are).
func (h routes) waitForRoots(r *http.Request, index uint64, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	// A server that shuts down answers at once, so that its shutdown does
	// not wait on the read; the client reads again, from another server.
	defer context.AfterFunc(httpapi.Stopping(r.Context()), cancel)()
	watch, err := h.api.Watch(ctx, &pbresource.WatchListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}, SinceIndex: index})
	if resource.NeedsRelist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer watch.Close()
	for {
		ev, err := watch.Next(ctx)
		switch {
		case err != nil && r.Context().Err() == nil && ctx.Err() != nil:
			return nil // waited long enough: answer with the roots as they are
		case resource.NeedsRelist(err):
			return nil
		case err != nil:
			return err
		case ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			return nil // a change after index
		}
	}
}

// snapshotRoots reads the roots with the store index they are as of: a
// watch's opening snapshot, which ends with that index.
func (h routes) snapshotRoots(r *http.Request) ([]*pbresource.Resource, uint64, error) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	watch, err := h.api.Watch(ctx, &pbresource.WatchListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}})
	if err != nil {
		return nil, 0, err
	}
	defer watch.Close()
	var list []*pbresource.Resource
	for {
		ev, err := watch.Next(ctx)
		if err != nil {
			return nil, 0, err
		}
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			return list, ev.GetIndex(), nil
		}
		list = append(list, ev.GetResource())
	}
}
