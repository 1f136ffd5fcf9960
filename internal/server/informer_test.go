package server_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

// probeItemType is the informer probe's type: a string per item.
var probeItemType = &pbresource.Type{Group: "probe", GroupVersion: "v1", Kind: "Item"}

// informerProbe is a module that declares its type in the server's
// informer, as a module whose routes read on any server does, and keeps
// the informer for the test.
type informerProbe struct{ in **informer.Informer }

func (informerProbe) Name() string { return "informer-probe" }
func (informerProbe) Register(r *resource.Registry) {
	r.Register(resource.Registration{Type: probeItemType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
}
func (p informerProbe) Setup(d module.Deps) (module.Parts, error) {
	if d.Informer == nil {
		return module.Parts{}, errors.New("no informer in the module's deps")
	}
	*p.in = d.Informer
	return module.Parts{}, d.Informer.Declare(controller.CachedType{Type: probeItemType})
}

// On a three-server Raft cluster every server's informer, followers'
// too, follows the store: a read bounded by a write's index answers only
// once the server has applied it, and then holds the write; a consistent
// read on a follower, made after a write the leader acknowledged, holds
// that write (its index is the leader's read index); and a bound the
// cluster has not reached is not answered.
func TestFollowersInformerReadsBoundedByIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	informers := make([]*informer.Informer, 3)
	n := 0
	servers, _ := raftClusterStops(t, 0, nil, func(cfg *server.Config) {
		cfg.Modules = append(server.DefaultModules(), informerProbe{in: &informers[n]})
		n++
	})
	leader := leaderOf(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for round := range 10 {
		name := "item-" + strconv.Itoa(round)
		data, _ := anypb.New(wrapperspb.String(name))
		out, err := leader.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
			Id:   &pbresource.ID{Type: probeItemType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name},
			Data: data,
		}})
		if err != nil {
			t.Fatal(err)
		}
		written := out.GetResource()
		idx, err := strconv.ParseUint(written.GetVersion(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		for i, srv := range servers {
			in := informers[i]
			role := "follower"
			if srv == leader {
				role = "leader"
			}
			// A consistent read first: it must hold the write the leader
			// acknowledged without being told its index.
			at, err := in.WaitConsistent(ctx, probeItemType)
			if err != nil {
				t.Fatalf("round %d, %s %d: consistent read: %v", round, role, i, err)
			}
			if got := in.Get(written.GetId()); got == nil || got.Resource.GetVersion() != written.GetVersion() {
				t.Fatalf("round %d, %s %d: a consistent read at index %d does not hold %s at version %s (got %v)", round, role, i, at, name, written.GetVersion(), got)
			}
			if err := in.WaitIndex(ctx, probeItemType, idx); err != nil {
				t.Fatalf("round %d, %s %d: read bounded by %d: %v", round, role, i, idx, err)
			}
			if applied := raftBackend(srv).Store().Index(); applied < idx {
				t.Fatalf("round %d, %s %d: a read bounded by %d answered while the store has applied only %d", round, role, i, idx, applied)
			}
			if in.Index(probeItemType) < idx {
				t.Fatalf("round %d, %s %d: the informer is at %d after a read bounded by %d", round, role, i, in.Index(probeItemType), idx)
			}
		}
	}

	// A bound no server has reached is not answered.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	follower := 0
	if servers[follower] == leader {
		follower = 1
	}
	far := raftBackend(leader).Store().Index() + 1000
	if err := informers[follower].WaitIndex(short, probeItemType, far); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a read bounded by index %d, which the cluster has not reached: %v; want it held until the deadline", far, err)
	}
}
