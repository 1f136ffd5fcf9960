package server

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func TestBootstrapStoresDefaultNamespace(t *testing.T) {
	reg := resource.NewRegistry()
	core.Register(reg)
	backend := inmem.NewBackend()
	svc := resource.NewService(resource.Config{Backend: backend, Registry: reg})
	b := newBootstrapper(svc, backend, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Start(ctx)
	<-b.Ready()
	if _, err := svc.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID(core.DefaultNamespace)}); err != nil {
		t.Fatalf("default namespace after ready: %v", err)
	}
}

func TestBootstrapRetriesWhileLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := make(srcLeadership, 1)
		b := newBootstrapper(nil, src, slog.New(slog.DiscardHandler))
		calls := 0
		b.bootstrap = func(context.Context, resource.API) error {
			calls++
			if calls < 4 {
				return errors.New("no leader yet")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		src <- true
		go b.Start(ctx)
		<-b.Ready()
		// 100ms + 200ms + 400ms of backoff between four attempts.
		if calls != 4 || time.Since(start) != 700*time.Millisecond {
			t.Fatalf("%d calls in %v", calls, time.Since(start))
		}
		// Losing and regaining leadership bootstraps again.
		src <- false
		src <- true
		synctest.Wait()
		if calls != 5 {
			t.Fatalf("%d calls after regaining leadership", calls)
		}
	})
}

func TestBootstrapFollowerIsReadyAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := make(srcLeadership, 1)
		b := newBootstrapper(nil, src, slog.New(slog.DiscardHandler))
		b.bootstrap = func(context.Context, resource.API) error { t.Error("follower bootstrapped"); return nil }
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		src <- false
		go b.Start(ctx)
		<-b.Ready()
	})
}
