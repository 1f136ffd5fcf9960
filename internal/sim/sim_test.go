package sim_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/sim"
	"trellis.dev/trellis/internal/testlog"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func write(t *testing.T, api resource.API, id *pbresource.ID, msg proto.Message) {
	t.Helper()
	data, err := anypb.New(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Data: data}}); err != nil {
		t.Fatal(err)
	}
}

// A fleet of simulated instances registers against a real server and runs
// what is placed on it, as real agents would.
func TestFleetRegistersAndRunsTasks(t *testing.T) {
	srv, err := server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-srvDone
	})

	fleet, err := sim.New(sim.Config{Servers: []string{srv.GRPCAddr()}, Instances: 20, Zones: 3, StartRate: 1000, Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	fleetDone := make(chan error, 1)
	go func() { fleetDone <- fleet.Run(ctx, nil) }()

	api := srv.API()
	eventually(t, "every simulated instance is ready", func() bool {
		list, err := api.List(ctx, &pbresource.ListRequest{Type: orchestrator.InstanceType})
		if err != nil || len(list.GetResources()) != 20 {
			return false
		}
		for _, r := range list.GetResources() {
			in, err := orchestrator.DecodeInstance(r) // as readers see it: the registration in status["agent"] merged
			if err != nil || in.GetStatus() != orchestrator.InstanceReady || in.GetAttributes()["simulated"] != "true" || in.GetAttributes()["zone"] == "" {
				return false
			}
		}
		return true
	})

	write(t, api, orchestrator.TaskDefinitionID("default", "web", 1), &pborch.TaskDefinition{Family: "web", Revision: 1,
		Containers: []*pborch.ContainerDefinition{{Name: "app", Driver: "docker", Image: "web:1"}}})
	for _, inst := range []string{"sim-3", "sim-17"} {
		write(t, api, orchestrator.TaskID("default", "on-"+inst), &pborch.Task{TaskDefinition: "web:1", Instance: inst})
	}
	eventually(t, "both tasks run", func() bool {
		for _, inst := range []string{"sim-3", "sim-17"} {
			r, err := api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.TaskID("default", "on-"+inst)})
			if err != nil {
				return false
			}
			if orchestrator.TaskStatusOf(r.GetResource()).GetLastStatus() != orchestrator.StatusRunning {
				return false
			}
		}
		return fleet.Running() == 2
	})
	cancel()
	if err := <-fleetDone; err != nil {
		t.Fatalf("fleet: %v", err)
	}
}
