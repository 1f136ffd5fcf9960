package agent

import (
	"context"
	"math/rand/v2"

	"trellis.dev/trellis/internal/informer"
)

// newInformer makes the agent's informer: the one indexed cache of what
// its components follow, fed by one watch per type over the session's
// link to the servers (session.Session is a resource.Watcher), so that
// every watch moves with the session when it fails over.
func (a *Agent) newInformer() (*informer.Informer, error) {
	return informer.New(informer.Config{
		Source: agentServers{a}, // the session, made after the informer
		Rand:   rand.Float64,
		Logger: a.log.With("component", "informer"),
	})
}

// Informer is the agent's indexed cache of the types its components
// follow over its link to the servers. A component declares its types
// (informer.Informer.Declare) before the agent starts; then it reads them
// and subscribes to their deltas.
func (a *Agent) Informer() *informer.Informer { return a.informer }

// runInformer runs the informer until ctx ends; the returned wait
// returns once it has stopped.
func (a *Agent) runInformer(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.informer.Start(ctx)
	}()
	return func() { <-done }
}
