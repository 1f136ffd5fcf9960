package resource_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/testlog"
)

// setRecorder is a WatchedSet's Changed: it keeps each set it was given
// as "name=value" pairs, sorted. fail, when set, is what the next call
// returns (once); gate, when set, is waited on before each call returns.
type setRecorder struct {
	t    *testing.T
	mu   sync.Mutex
	sets []string
	fail error
	gate chan struct{}
}

func (r *setRecorder) changed(set map[string]*pbresource.Resource) error {
	var pairs []string
	for name, res := range set {
		if name != res.GetId().GetName() {
			r.t.Errorf("%s is keyed %q", res.GetId().GetName(), name)
		}
		v, err := resource.DecodeData[*wrapperspb.StringValue](res)
		if err != nil {
			r.t.Errorf("decode %s: %v", name, err)
		}
		pairs = append(pairs, name+"="+v.GetValue())
	}
	slices.Sort(pairs)
	r.mu.Lock()
	r.sets = append(r.sets, strings.Join(pairs, " "))
	err, gate := r.fail, r.gate
	r.fail = nil
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return err
}

// last is how many sets Changed was given, and the last one.
func (r *setRecorder) last() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return 0, ""
	}
	return len(r.sets), r.sets[len(r.sets)-1]
}

// requireLast fails unless Changed was called calls times in all, the
// last with want.
func (r *setRecorder) requireLast(calls int, want string) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) != calls || r.sets[len(r.sets)-1] != want {
		r.t.Fatalf("Changed got %q, want %d calls, the last with %q", r.sets, calls, want)
	}
}

// startSet runs a WatchedSet of widgets in the default namespace and
// stops it at the end of the test, checking that Start returned nil.
func startSet(t *testing.T, src resource.Watcher, r *setRecorder, retry backoff.Policy) *resource.WatchedSet {
	t.Helper()
	ws := resource.NewWatchedSet(resource.WatchedSetConfig{
		Source: src, Type: widgetType, Namespace: "default",
		Changed: r.changed, Retry: retry, Logger: testlog.Logger(t),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ws.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v after its context ended, want nil", err)
		}
	})
	return ws
}

var testRetry = backoff.Policy{Base: time.Second, Max: 8 * time.Second}

// A WatchedSet hands over the whole set of one namespace after its
// snapshot and after each change, and says when the snapshot is in.
func TestWatchedSetFollowsTheSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.createNamespace("other")
		h.write(widget(t, "", "a", "1"))
		h.write(widget(t, "", "b", "1"))
		h.write(widget(t, "other", "a", "elsewhere"))
		h.write(gizmo(t, "", "g"))

		r := &setRecorder{t: t}
		ws := startSet(t, h.svc, r, testRetry)
		<-ws.Synced()
		r.requireLast(1, "a=1 b=1")

		h.write(widget(t, "", "c", "1"))
		synctest.Wait()
		r.requireLast(2, "a=1 b=1 c=1")
		h.write(widget(t, "", "a", "2"))
		synctest.Wait()
		r.requireLast(3, "a=2 b=1 c=1")
		if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: widgetID("", "b")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r.requireLast(4, "a=2 c=1")

		// Other namespaces and other types are not followed.
		h.write(widget(t, "other", "z", "1"))
		h.write(gizmo(t, "", "h"))
		synctest.Wait()
		r.requireLast(4, "a=2 c=1")
	})
}

// A watcher cut off for falling behind (here while Changed is slow) is
// opened again after the backoff, and its new snapshot replaces the set:
// what was deleted while no watch was open is gone from it.
func TestWatchedSetReopensAWatchCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessWith(t, inmem.NewBackend(inmem.WithWatcherBuffer(2)))
		h.write(widget(t, "", "a", "1"))
		src := &flakySource{inner: h.svc}
		r := &setRecorder{t: t}
		ws := startSet(t, src, r, testRetry)
		<-ws.Synced()
		r.requireLast(1, "a=1")

		r.mu.Lock()
		r.gate = make(chan struct{})
		r.mu.Unlock()
		h.write(widget(t, "", "b", "1"))
		synctest.Wait() // Changed holds the set with b
		if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: widgetID("", "a")}); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			h.write(widget(t, "", fmt.Sprintf("w%d", i), "1"))
		}
		r.mu.Lock()
		close(r.gate)
		r.gate = nil
		r.mu.Unlock()
		synctest.Wait() // the watch ended; the set waits for its backoff
		calls, got := r.last()
		if strings.Contains(got, "w4") {
			t.Fatalf("the cut-off watch delivered the last write: %q", got)
		}
		failedAt := time.Now()
		// Deleted while no watch is open: the next snapshot leaves it out.
		if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: widgetID("", "b")}); err != nil {
			t.Fatal(err)
		}

		time.Sleep(testRetry.Base)
		synctest.Wait()
		r.requireLast(calls+1, "w0=1 w1=1 w2=1 w3=1 w4=1")
		src.requireOpens(t, 0, testRetry.Base)
		if d := src.opened(1).Sub(failedAt); d != testRetry.Base {
			t.Fatalf("opened again %v after the failure, want %v", d, testRetry.Base)
		}

		h.write(widget(t, "", "w4", "2"))
		synctest.Wait()
		r.requireLast(calls+2, "w0=1 w1=1 w2=1 w3=1 w4=2")
	})
}

// Watches that fail to open are retried with a growing backoff, which a
// delivered snapshot resets; an error of Changed ends the watch as a
// broken one.
func TestWatchedSetBacksOffAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.write(widget(t, "", "a", "1"))
		start := time.Now()
		src := &flakySource{inner: h.svc, failOpens: 3}
		r := &setRecorder{t: t}
		ws := startSet(t, src, r, testRetry)
		<-ws.Synced()
		r.requireLast(1, "a=1")
		// 1 s, 2 s, then 4 s after the three refusals.
		src.requireOpens(t, 0, time.Second, 3*time.Second, 7*time.Second)
		if d := time.Since(start); d != 7*time.Second {
			t.Fatalf("synced after %v, want 7s", d)
		}

		// Changed refuses the next set: the watch ends and is opened again
		// after the first delay, the failures before the snapshot
		// forgotten.
		r.mu.Lock()
		r.fail = errors.New("cannot use this set")
		r.mu.Unlock()
		h.write(widget(t, "", "b", "1"))
		synctest.Wait()
		failedAt := time.Now()
		time.Sleep(time.Second)
		synctest.Wait()
		src.requireOpens(t, 0, time.Second, 3*time.Second, 7*time.Second, failedAt.Sub(start)+time.Second)
		r.requireLast(3, "a=1 b=1")
	})
}

func TestWatchedSetRefusesABadConfig(t *testing.T) {
	ok := func(map[string]*pbresource.Resource) error { return nil }
	for _, tc := range []struct {
		name string
		cfg  resource.WatchedSetConfig
		want []string
	}{
		{"empty", resource.WatchedSetConfig{}, []string{"source: missing", "type: missing", "changed: missing", "retry: base 0s and max 0s"}},
		{"wildcard", resource.WatchedSetConfig{Source: newHarness(t).svc, Type: widgetType, Namespace: "*", Changed: ok, Retry: testRetry},
			[]string{`watched set of demo/v1/Widget: namespace: "*" would follow every namespace`}},
		{"max under base", resource.WatchedSetConfig{Source: newHarness(t).svc, Type: widgetType, Changed: ok, Retry: backoff.Policy{Base: time.Second}},
			[]string{"retry: base 1s and max 0s: want 0 < base <= max"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := resource.NewWatchedSet(tc.cfg).Start(t.Context())
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("Start = %v, want an error saying %q", err, w)
				}
			}
		})
	}
}

// flakySource opens watches on inner, refusing the first failOpens with
// Unavailable (a follower not caught up), and notes when each was asked
// for.
type flakySource struct {
	inner     resource.Watcher
	mu        sync.Mutex
	failOpens int
	opens     []time.Time
}

func (f *flakySource) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	f.mu.Lock()
	f.opens = append(f.opens, time.Now())
	refuse := len(f.opens) <= f.failOpens
	f.mu.Unlock()
	if refuse {
		return nil, status.Error(codes.Unavailable, "not caught up yet")
	}
	return f.inner.Watch(ctx, req)
}

func (f *flakySource) opened(i int) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens[i]
}

// requireOpens fails unless the watches were asked for at these offsets
// from the first.
func (f *flakySource) requireOpens(t *testing.T, want ...time.Duration) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []time.Duration
	for _, at := range f.opens {
		got = append(got, at.Sub(f.opens[0]))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("watches opened at %v, want %v", got, want)
	}
}
