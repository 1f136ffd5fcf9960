package resource

import (
	"context"
	"trellis.dev/trellis/internal/acl"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// Watch opens a WatchList stream on the resources List would return: an
// upsert for each, END_OF_SNAPSHOT, then every change in order (or, with
// since_index, the changes after that index, END_OF_SNAPSHOT, then every
// change). Events for resources the caller may not read are left out. Its
// errors are status errors; OutOfRange (see NeedsRelist) means the watcher
// must list again and open a new watch.
func (s *Service) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	return s.watch(ctx, req, true)
}

// watch opens the watch; cloneEvents copies each event's resource, which
// in-process callers get to keep and the gRPC face only encodes.
func (s *Service) watch(ctx context.Context, req *pbresource.WatchListRequest, cloneEvents bool) (storage.Watch, error) {
	w, a, err := s.openWatch(ctx, req)
	if err != nil {
		return nil, s.errs.toStatus("watch", err)
	}
	return &filteredWatch{svc: s, inner: w, authz: a, ops: fromOperations(ctx), clone: cloneEvents}, nil
}

func (s *Service) openWatch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, acl.Authorizer, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, nil, err
	}
	reg, tenancy, err := s.registry.checkListQuery(req.GetType(), req.GetTenancy(), req.GetNamePrefix())
	if err != nil {
		return nil, nil, err
	}
	if err := checkSealed(ctx, reg); err != nil {
		return nil, nil, err
	}
	if err := s.authorizeList(a, reg, tenancy); err != nil {
		return nil, nil, err
	}
	w, err := s.backend.WatchList(ctx, reg.Type, tenancy, req.GetNamePrefix(), req.GetSinceIndex())
	if err != nil {
		return nil, nil, err
	}
	return w, a, nil
}

// filteredWatch passes on the events of a backend watch that the caller may
// read, with errors as status errors. The authorizer is the one resolved
// when the watch opened.
type filteredWatch struct {
	svc   *Service
	inner storage.Watch
	authz acl.Authorizer
	ops   bool // FromOperations: sealed resources may pass
	clone bool
}

func (w *filteredWatch) Next(ctx context.Context) (*pbresource.WatchEvent, error) {
	for {
		ev, err := w.inner.Next(ctx)
		if err != nil {
			return nil, w.svc.errs.toStatus("watch", err)
		}
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			return ev, nil
		}
		ok, err := w.svc.canRead(w.authz, w.ops, ev.GetResource())
		if err != nil {
			return nil, w.svc.errs.toStatus("watch", err)
		}
		if !ok {
			continue
		}
		if w.clone {
			ev = &pbresource.WatchEvent{Op: ev.GetOp(), Resource: clone(ev.GetResource()), Index: ev.GetIndex()}
		}
		return ev, nil
	}
}

func (w *filteredWatch) Close() { w.inner.Close() }
