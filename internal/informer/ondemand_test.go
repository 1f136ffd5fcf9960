package informer_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/testlog"
)

// A type declared on demand opens no watch until a consumer asks for it
// (an agent without a mesh task opens none of the proxy's watches); once
// asked, it is listed and followed like any other, asking again opens
// nothing more, and a plain declaration of the same type by another
// consumer follows it from Start.
func TestOnDemandTypesAreWatchedOnceFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, t, false)
		h.put("a", "g1")
		src := &breakable{inner: h.api}
		in, err := informer.New(informer.Config{Source: src, Retry: backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}, Logger: testlog.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.DeclareOnDemand(controller.CachedType{Type: itemType}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- in.Start(ctx) }()
		defer func() { cancel(); <-done }()

		synctest.Wait()
		if n := len(src.opens()); n != 0 || in.Synced(itemType) {
			t.Fatalf("before Follow: %d watches opened, synced %v; want none, not synced", n, in.Synced(itemType))
		}
		if err := in.Follow(itemType); err != nil {
			t.Fatal(err)
		}
		if err := in.Follow(itemType); err != nil { // again: nothing more
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(src.opens()); n != 1 || !in.Synced(itemType) || in.Get(itemID("a")) == nil {
			t.Fatalf("after Follow: %d watches, synced %v, a cached %v; want 1, true, true", n, in.Synced(itemType), in.Get(itemID("a")) != nil)
		}
		h.put("b", "g1")
		synctest.Wait()
		if in.Get(itemID("b")) == nil {
			t.Fatal("a write after Follow is not followed")
		}
		if err := in.Follow(&pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Nope"}); !errors.Is(err, informer.ErrNotDeclared) {
			t.Fatalf("Follow of an undeclared type: %v, want ErrNotDeclared", err)
		}
	})

	// Declared plainly by one consumer and on demand by another: followed
	// from Start.
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, t, false)
		src := &breakable{inner: h.api}
		in, err := informer.New(informer.Config{Source: src, Logger: testlog.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Declare(controller.CachedType{Type: itemType}); err != nil {
			t.Fatal(err)
		}
		if err := in.DeclareOnDemand(controller.CachedType{Type: itemType}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- in.Start(ctx) }()
		defer func() { cancel(); <-done }()
		synctest.Wait()
		if n := len(src.opens()); n != 1 {
			t.Fatalf("a type one consumer declared plainly: %d watches, want 1 from Start", n)
		}
	})
}
