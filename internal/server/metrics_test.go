package server_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
)

// A Raft-backed server's /v1/metrics has hashicorp/raft's own metrics
// (a write went through Raft, so its commit time was measured) and the
// gRPC calls it served, by method and code.
func TestMetricsServeRaftLibraryAndGRPC(t *testing.T) {
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), ServerAddr: "127.0.0.1:0",
		Raft:            &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 1, SingleServer: true},
		ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v", err)
		}
	})
	c, err := client.New("http://" + srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool { return c.Health(ctx) == nil }); err != nil {
		t.Fatal("single-server Raft cluster never became healthy")
	}
	if _, err := c.Write(ctx, client.Ref{Type: namespaces, Name: "metrics"}, wire.WriteRequest{Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rs := pbresource.NewResourceServiceClient(conn)
	if _, err := rs.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID("metrics")}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID("absent")}); status.Code(err) != codes.NotFound {
		t.Fatalf("Read of a missing namespace = %v, want NotFound", err)
	}

	mfs := scrape(t, "http://"+srv.HTTPAddr()+"/v1/metrics")
	commit := mfs["trellis_raft_commitTime"]
	if commit == nil || commit.GetType() != dto.MetricType_SUMMARY || commit.GetMetric()[0].GetSummary().GetSampleCount() == 0 {
		t.Errorf("trellis_raft_commitTime = %v, want a summary with samples", commit)
	}
	if mfs["trellis_raft_apply"] == nil {
		t.Error("trellis_raft_apply (hashicorp/raft's count of applied commands) missing")
	}
	handled := mfs["trellis_grpc_server_handled_total"]
	for _, want := range []struct {
		code  string
		count float64
	}{{"OK", 1}, {"NotFound", 1}} {
		m := findMetric(handled, map[string]string{
			"grpc_service": "trellis.resource.v1.ResourceService", "grpc_method": "Read", "grpc_type": "unary", "grpc_code": want.code,
		})
		if m == nil || m.GetCounter().GetValue() != want.count {
			t.Errorf("handled_total for Read %s = %v, want %v", want.code, m, want.count)
		}
	}
	hist := findMetric(mfs["trellis_grpc_server_handling_seconds"], map[string]string{
		"grpc_service": "trellis.resource.v1.ResourceService", "grpc_method": "Read", "grpc_type": "unary",
	})
	if hist == nil || hist.GetHistogram().GetSampleCount() != 2 {
		t.Errorf("handling_seconds for Read = %v, want 2 samples", hist)
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return mfs
}

// findMetric is the metric of mf whose labels are exactly want.
func findMetric(mf *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}
