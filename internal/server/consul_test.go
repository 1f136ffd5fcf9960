package server_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
)

// On a three-server Raft cluster a follower answers Consul's health route
// from its own informer: a consistent read holds a write the leader
// acknowledged, ?passing follows a TTL check refreshed through the
// follower (its write forwarded to the leader), and a blocking query on
// the follower answers when the check changes.
func TestConsulRoutesOnAFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	servers := raftCluster(t, 0)
	leader := leaderOf(t, servers)
	follower := servers[0]
	if follower == leader {
		follower = servers[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: "db", Address: "10.0.0.9", Port: 5432,
		Checks: []*pbcatalog.CheckDefinition{{Name: "alive", Ttl: durationpb.New(time.Hour)}}})
	if _, err := leader.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID("default", "db-1"), Data: data}}); err != nil {
		t.Fatal(err)
	}
	client, err := consul.NewClient(&consul.Config{Address: follower.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	health := client.Health()
	entries, meta, err := health.Service("db", "", false, (&consul.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || len(entries) != 1 || entries[0].Checks.AggregatedStatus() != consul.HealthCritical {
		t.Fatalf("a consistent read on the follower after the leader's write: %+v, %v", entries, err)
	}
	passing, _, err := health.Service("db", "", true, (&consul.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || len(passing) != 0 {
		t.Fatalf("?passing before any refresh: %+v, %v", passing, err)
	}

	type result struct {
		entries []*consul.ServiceEntry
		meta    *consul.QueryMeta
		err     error
	}
	got := make(chan result, 1)
	go func() {
		e, m, err := health.Service("db", "", true, (&consul.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 5 * time.Minute}).WithContext(ctx))
		got <- result{e, m, err}
	}()
	req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+follower.HTTPAddr()+catalog.ChecksPath+"/db-1/checks/alive", bytes.NewBufferString(`{"status":"passing","note":"ok"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("refreshing the check through the follower: %s", resp.Status)
	}
	r := <-got
	if r.err != nil || r.meta.LastIndex <= meta.LastIndex || len(r.entries) != 1 || r.entries[0].Checks[0].Status != consul.HealthPassing {
		t.Fatalf("the blocking query on the follower: index %v (was %d), %v", r.meta, meta.LastIndex, r.err)
	}
	passing, _, err = health.Service("db", "", true, (&consul.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || len(passing) != 1 || passing[0].Checks[0].Output != "ok" {
		t.Fatalf("?passing after the refresh: %+v, %v", passing, err)
	}
}
