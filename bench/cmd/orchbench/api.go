package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// namespace is where the benchmark's task definition and tasks live.
const namespace = "default"

// family is the benchmark's task definition: one exec container running
// sleep, revision 1.
const family = "orchbench"

// taskSleep is how long a task's sleep lasts: far beyond any cell, and
// short enough that a process leaked by a crash does not linger for long.
const taskSleep = "900"

// api is a gRPC client of one Trellis server's resource service.
type api struct {
	conn *grpc.ClientConn
	res  pbresource.ResourceServiceClient
}

func dial(addr string) (*api, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &api{conn: conn, res: pbresource.NewResourceServiceClient(conn)}, nil
}

func (a *api) close() { a.conn.Close() }

// registerTaskDef writes orchbench:1: one essential exec container
// sleeping, marked with the run id so that a leftover can be found.
func (a *api) registerTaskDef(ctx context.Context, runID string) error {
	data, err := anypb.New(&pborch.TaskDefinition{
		Family:   family,
		Revision: 1,
		Containers: []*pborch.ContainerDefinition{{
			Name:    "app",
			Driver:  "exec",
			Command: []string{"sleep", taskSleep},
			Env:     map[string]string{taskMark: runID},
		}},
	})
	if err != nil {
		return err
	}
	_, err = a.res.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: orchestrator.TaskDefinitionID(namespace, family, 1), Data: data,
	}})
	if err != nil {
		return fmt.Errorf("register %s:1: %w", family, err)
	}
	return nil
}

// placeTask writes a Task of orchbench:1 on instance, as `trellis task
// run` does, and returns when the write is acknowledged.
func (a *api) placeTask(ctx context.Context, name, instance string) error {
	data, err := anypb.New(&pborch.Task{
		TaskDefinition: orchestrator.TaskDefinitionRef(family, 1),
		Instance:       instance,
		StartedBy:      "orchbench",
		DesiredStatus:  orchestrator.StatusRunning,
	})
	if err != nil {
		return err
	}
	_, err = a.res.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: orchestrator.TaskID(namespace, name), Data: data,
	}})
	if err != nil {
		return fmt.Errorf("place task %s: %w", name, err)
	}
	return nil
}

// stopTask sets the task's desired status to STOPPED: a read, then a
// write with the version read, again on a conflict (the agent writes its
// reports to the same resource).
func (a *api) stopTask(ctx context.Context, name string) error {
	for attempt := 0; attempt < 20; attempt++ {
		resp, err := a.res.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.TaskID(namespace, name)})
		if err != nil {
			return fmt.Errorf("stop task %s: %w", name, err)
		}
		res := resp.GetResource()
		var t pborch.Task
		if err := res.GetData().UnmarshalTo(&t); err != nil {
			return err
		}
		if t.GetDesiredStatus() == orchestrator.StatusStopped {
			return nil
		}
		t.DesiredStatus = orchestrator.StatusStopped
		data, err := anypb.New(&t)
		if err != nil {
			return err
		}
		res = proto.Clone(res).(*pbresource.Resource)
		res.Data = data
		_, err = a.res.Write(ctx, &pbresource.WriteRequest{Resource: res})
		if status.Code(err) == codes.Aborted {
			continue
		}
		if err != nil {
			return fmt.Errorf("stop task %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("stop task %s: conflicts on every attempt", name)
}

func (a *api) deleteTask(ctx context.Context, name string) error {
	_, err := a.res.Delete(ctx, &pbresource.DeleteRequest{Id: orchestrator.TaskID(namespace, name)})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("delete task %s: %w", name, err)
	}
	return nil
}

// retire stops the tasks, waits until the agent reports them ended, and
// deletes them, so that the agent runs only what the next measurement
// places.
func retire(ctx context.Context, a *api, tw *taskWatch, names []string, waits []*taskWait) error {
	for _, n := range names {
		if err := a.stopTask(ctx, n); err != nil {
			return err
		}
	}
	for i, n := range names {
		if err := tw.wait(ctx, waits[i].ended, 60*time.Second); err != nil {
			return fmt.Errorf("task %s: no STOPPED report: %w", n, err)
		}
		tw.forget(n)
		if err := a.deleteTask(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// registerSimDef writes family:revision, one exec container; on a
// simulated instance it runs without a process.
func (a *api) registerSimDef(ctx context.Context, family string, revision int64) error {
	data, err := anypb.New(&pborch.TaskDefinition{
		Family:     family,
		Revision:   revision,
		Containers: []*pborch.ContainerDefinition{{Name: "daemon", Driver: "exec", Command: []string{"sleep", "infinity"}}},
	})
	if err != nil {
		return err
	}
	_, err = a.res.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: orchestrator.TaskDefinitionID(namespace, family, revision), Data: data,
	}})
	if err != nil {
		return fmt.Errorf("register %s:%d: %w", family, revision, err)
	}
	return nil
}
