package agent

import (
	"context"
	"crypto/tls"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tlsutil"
)

// The agent's leaf cache (package leaves): its own agent leaf and one
// leaf per service of the tasks it runs. With auto-encrypt the agent
// leaf is also what the agent presents to the servers.

// setupLeafCache makes the cache and its link to the servers: the
// session's connection while the session is on a server (onServer), a
// connection of its own before the session's first (with auto-encrypt the
// agent joins only once it holds its leaf) and between two. With
// auto-encrypt it also sets how the agent dials the servers: checking
// them against the cluster CA at first; once the cache holds the agent
// leaf and the CA's roots, presenting the leaf and asking each server for
// its own Connect leaf (tlsutil.ConnectClientConfig), made anew for every
// connection so that a renewal or a rotation applies to the next one.
func (a *Agent) setupLeafCache() error {
	cfg := a.cfg
	if cfg.AutoEncrypt {
		// The cache is made below; the closure reads it at each
		// connection, by when it exists.
		a.creds = tlsutil.GRPCClientCredentials(func() *tls.Config {
			return tlsutil.ConnectClientConfig(cfg.TLS, cfg.Datacenter, tlsutil.DefaultDomain, a.leaves)
		})
	}
	creds := a.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, leaves.Token(cfg.Token)...)
	opts = append(opts, cfg.DialOptions...)
	a.leafServers = leaves.NewServersOn(a.servers, a.log.With("component", "leaves"), opts...)
	c, err := leaves.New(leaves.Config{
		Signer: a.leafServers, Datacenter: cfg.Datacenter, Instance: cfg.Name,
		ResignWindow: cfg.ResignWindow, Logger: a.log.With("component", "leaves"),
	})
	if err != nil {
		return err
	}
	a.leaves = c
	return nil
}

// Leaves is the agent's leaf cache, nil when it is turned off.
func (a *Agent) Leaves() *leaves.Cache { return a.leaves }

// runLeafCache runs the cache, its watch of the roots and its following
// of the agent's services until ctx ends; wait waits for them.
func (a *Agent) runLeafCache(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for _, fn := range []func(context.Context){
		func(ctx context.Context) { a.leafServers.WatchRoots(ctx, a.leaves.SetRoots) },
		a.leaves.Run,
		a.followServices,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx)
		}()
	}
	return func() {
		wg.Wait()
		a.leafServers.Close()
	}
}

// followServices keeps the cache's services those of the agent's tasks
// (tasks.Manager.Services): a mesh task's is its mesh block's service,
// whose leaf its proxy presents; any other task's is its family. A name
// that is not a DNS label cannot be a SPIFFE id's service and has no
// leaf.
func (a *Agent) followServices(ctx context.Context) {
	var last []leaves.Key
	for {
		changed := a.tasks.Changed()
		var keys []leaves.Key
		for _, f := range a.tasks.Services() {
			if resource.IsDNSLabel(f.Namespace) && resource.IsDNSLabel(f.Family) {
				keys = append(keys, leaves.ServiceKey(f.Namespace, f.Family))
			}
		}
		if !sameKeys(keys, last) {
			if err := a.leaves.SetServices(keys); err != nil {
				a.log.Warn("leaf cache: services refused", "err", err)
			}
			last = keys
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func sameKeys(a, b []leaves.Key) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
