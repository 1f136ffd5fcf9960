package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/testcluster"
)

// namespace is where the benchmark's services live.
const namespace = "default"

// service is the service the watchers watch and the reads read.
const service = "x"

// cluster is 3 servers and a client of each one's resource service.
type cluster struct {
	*testcluster.Cluster
	leader *testcluster.Member
	conns  []*grpc.ClientConn
	res    []pbresource.ResourceServiceClient
}

// startCluster starts 3 servers with their defaults (Raft's timings
// included), waits for their leader and dials each.
func (b *bench) startCluster(ctx context.Context, dir string) (*cluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	extra := []string{"-log-level", "warn"}
	if b.profile {
		extra = append(extra, "-enable-debug")
	}
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: b.trellis, Dir: dir, Servers: 3, Extra: extra})
	if err != nil {
		return nil, err
	}
	cl := &cluster{Cluster: c}
	if cl.leader, err = c.WaitLeader(ctx, c.Members); err != nil {
		cl.stop()
		return nil, err
	}
	for _, m := range c.Members {
		conn, err := grpc.NewClient(m.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			cl.stop()
			return nil, err
		}
		cl.conns = append(cl.conns, conn)
		cl.res = append(cl.res, pbresource.NewResourceServiceClient(conn))
	}
	return cl, nil
}

func (cl *cluster) stop() {
	for _, c := range cl.conns {
		c.Close()
	}
	cl.Stop()
}

// leaderAPI is the leader's resource service.
func (cl *cluster) leaderAPI() pbresource.ResourceServiceClient {
	for i, m := range cl.Members {
		if m == cl.leader {
			return cl.res[i]
		}
	}
	return cl.res[0]
}

// fetchProfiles saves each server's CPU profile of the next d into dir
// (server<i>.cpu.pprof), in the background; wait for it with the
// returned function.
func fetchProfiles(ctx context.Context, cl *cluster, dir string, d time.Duration) func() error {
	errs := make(chan error, len(cl.Members))
	for i, m := range cl.Members {
		go func() {
			errs <- func() error {
				url := fmt.Sprintf("http://%s/v1/debug/pprof/profile?seconds=%d", m.HTTPAddr, int(d.Seconds()))
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return err
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET %s: %s", url, resp.Status)
				}
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("server%d.cpu.pprof", i)))
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(f, resp.Body)
				return err
			}()
		}()
	}
	return func() error {
		var all []error
		for range cl.Members {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}
}

// leaderIndex is the index of the leader among the members.
func leaderIndex(cl *cluster) int {
	for i, m := range cl.Members {
		if m == cl.leader {
			return i
		}
	}
	return 0
}

func serverPIDs(cl *cluster) []int {
	var out []int
	for _, m := range cl.Members {
		out = append(out, m.PID())
	}
	return out
}

// follower is a server that does not lead.
func (cl *cluster) follower() *testcluster.Member {
	for _, m := range cl.Members {
		if m != cl.leader {
			return m
		}
	}
	return cl.leader
}

// writeData writes a resource of id with data msg (and owner), and
// returns it as stored.
func writeData(ctx context.Context, api pbresource.ResourceServiceClient, id, owner *pbresource.ID, data *anypb.Any) (*pbresource.Resource, error) {
	resp, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Owner: owner, Data: data}})
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", id.GetName(), err)
	}
	return resp.GetResource(), nil
}

// writeService writes the Service called name.
func writeService(ctx context.Context, api pbresource.ResourceServiceClient, name string) error {
	data, err := anypb.New(&pbcatalog.Service{Protocol: catalog.ProtocolHTTP, Ports: []*pbcatalog.ServicePort{{Name: "http", Port: 8080}}})
	if err != nil {
		return err
	}
	_, err = writeData(ctx, api, catalog.ServiceID(namespace, name), nil, data)
	return err
}

// agentSession waits until the sim instance called instance has
// registered, and returns the session its agent registered, which proves
// its status writes (resource.AgentSessionMetadataKey).
func agentSession(ctx context.Context, api pbresource.ResourceServiceClient, instance string) (string, error) {
	var session string
	err := testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(instance)})
		if err != nil {
			return false
		}
		reg := &pborch.AgentRegistration{}
		st := resp.GetResource().GetStatus()["agent"]
		if st.GetData() == nil || st.GetData().UnmarshalTo(reg) != nil {
			return false
		}
		session = reg.GetSession()
		return session != ""
	})
	if err != nil {
		return "", fmt.Errorf("instance %s did not register: %w", instance, err)
	}
	return session, nil
}

// httpClient keeps a connection to each server for each of n concurrent
// requests, as n Consul clients would.
func httpClient(n int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * n, MaxIdleConnsPerHost: n, IdleConnTimeout: 5 * time.Minute}}
}
