package resource_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// scriptedSource hands out, for each Watch, the next scripted watch (or
// open error), and records what each was opened after; past the script it
// ends the test's context.
type scriptedSource struct {
	cancel context.CancelFunc
	script []scripted
	since  []uint64
}

type scripted struct {
	openErr error
	events  []*pbresource.WatchEvent
	end     error // what Next returns after the events
}

func (s *scriptedSource) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	s.since = append(s.since, req.GetSinceIndex())
	if len(s.script) == 0 {
		s.cancel()
		return nil, ctx.Err()
	}
	next := s.script[0]
	s.script = s.script[1:]
	if next.openErr != nil {
		return nil, next.openErr
	}
	return &scriptedWatch{events: next.events, end: next.end}, nil
}

type scriptedWatch struct {
	events []*pbresource.WatchEvent
	end    error
}

func (w *scriptedWatch) Next(context.Context) (*pbresource.WatchEvent, error) {
	if len(w.events) == 0 {
		return nil, w.end
	}
	ev := w.events[0]
	w.events = w.events[1:]
	return ev, nil
}

func (w *scriptedWatch) Close() {}

// recorder is a Follower that writes down what it is handed.
type recorder struct{ calls []string }

func (r *recorder) Listed(list []*pbresource.Resource, idx uint64) {
	var names []string
	for _, res := range list {
		names = append(names, res.GetId().GetName())
	}
	r.calls = append(r.calls, fmt.Sprintf("listed %s @%d", strings.Join(names, ","), idx))
}
func (r *recorder) Upserted(res *pbresource.Resource, idx uint64) {
	r.calls = append(r.calls, fmt.Sprintf("upsert %s @%d", res.GetId().GetName(), idx))
}
func (r *recorder) Deleted(res *pbresource.Resource, idx uint64) {
	r.calls = append(r.calls, fmt.Sprintf("delete %s @%d", res.GetId().GetName(), idx))
}
func (r *recorder) Progressed(complete uint64) {
	r.calls = append(r.calls, fmt.Sprintf("complete %d", complete))
}

func ev(op pbresource.WatchEvent_Op, name string, idx uint64) *pbresource.WatchEvent {
	e := &pbresource.WatchEvent{Op: op, Index: idx}
	if name != "" {
		e.Resource = &pbresource.Resource{Id: &pbresource.ID{Name: name}}
	}
	return e
}

// TestFollowResumesAfterTheIndexWhollySeen: a watch broken in the middle
// of a batch (two changes at one index) is opened again after the index
// before it, so the batch comes again whole and nothing is lost; a watch
// that cannot resume (OutOfRange) lists again; each restart is reported.
func TestFollowResumesAfterTheIndexWhollySeen(t *testing.T) {
	const (
		up   = pbresource.WatchEvent_OP_UPSERT
		del  = pbresource.WatchEvent_OP_DELETE
		mark = pbresource.WatchEvent_OP_END_OF_SNAPSHOT
	)
	broken := errors.New("stream broken")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &scriptedSource{cancel: cancel, script: []scripted{
		{events: []*pbresource.WatchEvent{ev(up, "a", 5), ev(up, "b", 5), ev(mark, "", 5), ev(up, "c", 7), ev(up, "d", 7)}, end: broken},
		{events: []*pbresource.WatchEvent{ev(up, "c", 7), ev(up, "d", 7), ev(mark, "", 9), ev(del, "a", 10)}, end: status.Error(codes.OutOfRange, "cut off")},
		{openErr: status.Error(codes.OutOfRange, "index too old")},
		{events: []*pbresource.WatchEvent{ev(up, "b", 12), ev(up, "c", 12), ev(up, "d", 12), ev(mark, "", 12)}, end: broken},
	}}
	var restarts []string
	rec := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resource.Follow(ctx, resource.FollowConfig{
			Source:    src,
			Type:      &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Item"},
			Retry:     backoff.Policy{Base: time.Millisecond, Max: time.Millisecond},
			Restarted: func(how string) { restarts = append(restarts, how) },
		}, rec)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end with its context")
	}
	if want := []uint64{0, 6, 9, 0, 12}; !slices.Equal(src.since, want) {
		t.Errorf("watches opened after %v; want %v (resumed before the broken batch, listed again when it could not resume)", src.since, want)
	}
	want := []string{
		"listed a,b @5", "complete 5",
		"upsert c @7", "complete 6", "upsert d @7", "complete 6",
		"upsert c @7", "complete 6", "upsert d @7", "complete 6", "complete 9",
		"delete a @10", "complete 9",
		"listed b,c,d @12", "complete 12",
	}
	if !slices.Equal(rec.calls, want) {
		t.Errorf("the follower was handed\n%s\nwant\n%s", strings.Join(rec.calls, "\n"), strings.Join(want, "\n"))
	}
	if want := []string{"resume", "resume", "relist", "resume"}; !slices.Equal(restarts, want) {
		t.Errorf("restarts %v; want %v", restarts, want)
	}
}

// TestFollowRefusesAListingOlderThanWhatItHanded: a listing from a server
// behind the index the follower has already been handed (a lagging one,
// after the watch could not resume) is refused whole: the follower is not
// taken back in time. Follow resumes from what it holds, and takes the
// first listing at least as new.
func TestFollowRefusesAListingOlderThanWhatItHanded(t *testing.T) {
	const (
		up   = pbresource.WatchEvent_OP_UPSERT
		mark = pbresource.WatchEvent_OP_END_OF_SNAPSHOT
	)
	broken := errors.New("stream broken")
	tooOld := status.Error(codes.OutOfRange, "index too old")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &scriptedSource{cancel: cancel, script: []scripted{
		{events: []*pbresource.WatchEvent{ev(up, "a", 5), ev(up, "b", 5), ev(mark, "", 5), ev(up, "c", 8), ev(mark, "", 9)}, end: broken},
		{openErr: tooOld},
		// A lagging server lists as of index 7, before c.
		{events: []*pbresource.WatchEvent{ev(up, "a", 7), ev(mark, "", 7)}, end: broken},
		{openErr: tooOld},
		{events: []*pbresource.WatchEvent{ev(up, "a", 11), ev(up, "b", 11), ev(up, "c", 11), ev(mark, "", 11)}, end: broken},
	}}
	var restarts []string
	rec := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resource.Follow(ctx, resource.FollowConfig{
			Source:    src,
			Type:      &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Item"},
			Retry:     backoff.Policy{Base: time.Millisecond, Max: time.Millisecond},
			Restarted: func(how string) { restarts = append(restarts, how) },
		}, rec)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end with its context")
	}
	if want := []uint64{0, 9, 0, 9, 0, 11}; !slices.Equal(src.since, want) {
		t.Errorf("watches opened after %v; want %v (after the stale listing, resumed from the index held)", src.since, want)
	}
	want := []string{
		"listed a,b @5", "complete 5",
		"upsert c @8", "complete 7", "complete 9",
		"listed a,b,c @11", "complete 11",
	}
	if !slices.Equal(rec.calls, want) {
		t.Errorf("the follower was handed\n%s\nwant\n%s", strings.Join(rec.calls, "\n"), strings.Join(want, "\n"))
	}
	if want := []string{"resume", "relist", "resume", "relist", "resume"}; !slices.Equal(restarts, want) {
		t.Errorf("restarts %v; want %v", restarts, want)
	}
}
