package agent

import (
	"context"
	"sync"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/orchestrator"
)

// instancesByStatus is the test's index: instances by their status.
var instancesByStatus = &controller.Index{Name: "status", Keys: func(o *controller.Object) []string {
	in, ok := controller.Decoded[*pborch.Instance](o)
	if !ok {
		return nil
	}
	return []string{in.GetStatus()}
}}

// The agent's informer follows, over the session's link to the servers,
// the types its components declare before the agent starts, and hands a
// subscriber each change as a delta: the agent's own Instance as it
// registers, another instance added, then removed.
func TestAgentInformerFollowsTheServersOverTheSession(t *testing.T) {
	srv := startServer(t)
	a, err := New(config(t, "i-1", newProcTable(t), srv))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Informer().Declare(controller.CachedType{Type: orchestrator.InstanceType, Indexes: []*controller.Index{instancesByStatus}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		deltas []string
	)
	if _, err := a.Informer().Subscribe(orchestrator.InstanceType, func(d informer.Delta) {
		mu.Lock()
		defer mu.Unlock()
		deltas = append(deltas, d.Op.String()+" "+d.Resource().GetId().GetName())
	}); err != nil {
		t.Fatal(err)
	}
	saw := func(want string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, d := range deltas {
				if d == want {
					return true
				}
			}
			return false
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	eventually(t, "the agent's informer has its own instance", saw("added i-1"))
	if a.Informer().Get(orchestrator.InstanceID("i-1")) == nil {
		t.Fatal("the informer handed on i-1 but does not hold it")
	}
	srv.write(t, orchestrator.InstanceID("i-2"), &pborch.Instance{Cluster: "default", Status: orchestrator.InstanceDraining, Drain: true})
	eventually(t, "the agent's informer has i-2", saw("added i-2"))
	if got := a.Informer().ByIndex(orchestrator.InstanceType, instancesByStatus.Name, orchestrator.InstanceDraining); len(got) != 1 || got[0].Resource.GetId().GetName() != "i-2" {
		t.Fatalf("draining instances in the informer: %d; want i-2 alone", len(got))
	}
	if _, err := srv.res.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.InstanceID("i-2")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent's informer removed i-2", saw("removed i-2"))
	if a.Informer().Get(orchestrator.InstanceID("i-2")) != nil {
		t.Fatal("i-2 is removed but still held")
	}
}
