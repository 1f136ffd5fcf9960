package session

import (
	"context"
	"sync"

	"google.golang.org/grpc"
)

// runOnServer starts Config.OnServer with the connection to the server
// the agent is on; stop ends them and waits. They do not end the
// connection: what fails in them is theirs to retry.
func (s *Session) runOnServer(ctx context.Context, cc grpc.ClientConnInterface) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, fn := range s.cfg.OnServer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx, cc)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
