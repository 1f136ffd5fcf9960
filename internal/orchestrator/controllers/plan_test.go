package controllers_test

import (
	"reflect"
	"testing"
	"time"

	"trellis.dev/trellis/internal/orchestrator/controllers"
)

func TestPlanLost(t *testing.T) {
	const ttl = 10 * time.Second
	instances := map[string]controllers.InstanceState{
		"ready":    {Status: "ready"},
		"draining": {Status: "draining"},
		"down":     {Status: "down"},
		"left":     {Status: "left"},
	}
	for _, c := range []struct {
		name  string
		tasks []controllers.TaskState
		want  []controllers.Lost
	}{
		{"tasks on live instances are the agent's", []controllers.TaskState{
			{Key: "a", Instance: "ready", LastStatus: "RUNNING"},
			{Key: "b", Instance: "draining", LastStatus: "PENDING"},
		}, nil},
		{"live tasks on a down instance are lost", []controllers.TaskState{
			{Key: "b", Instance: "down", LastStatus: "RUNNING"},
			{Key: "a", Instance: "down", LastStatus: "PENDING"},
		}, []controllers.Lost{
			{Key: "a", Reason: "instance down down: no heartbeat for 10s"},
			{Key: "b", Reason: "instance down down: no heartbeat for 10s"},
		}},
		{"live tasks on a left instance are lost", []controllers.TaskState{
			{Key: "a", Instance: "left", LastStatus: "RUNNING"},
		}, []controllers.Lost{{Key: "a", Reason: "instance left left the cluster"}}},
		{"live tasks on a removed instance are lost", []controllers.TaskState{
			{Key: "a", Instance: "gone", LastStatus: "RUNNING"},
		}, []controllers.Lost{{Key: "a", Reason: "instance gone was removed"}}},
		{"ended tasks are kept, whatever became of their instance", []controllers.TaskState{
			{Key: "a", Instance: "left", LastStatus: "STOPPED"},
			{Key: "b", Instance: "left", LastStatus: "LOST"},
			{Key: "c", Instance: "down", LastStatus: "STOPPED"},
			{Key: "d", Instance: "gone", LastStatus: "LOST"},
		}, nil},
		{"a mix", []controllers.TaskState{
			{Key: "ns/x", Instance: "ready", LastStatus: "RUNNING"},
			{Key: "ns/y", Instance: "down", LastStatus: "RUNNING"},
			{Key: "ns/z", Instance: "down", LastStatus: "STOPPED"},
		}, []controllers.Lost{{Key: "ns/y", Reason: "instance down down: no heartbeat for 10s"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := controllers.PlanLost(instances, c.tasks, ttl); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("PlanLost = %+v\nwant %+v", got, c.want)
			}
		})
	}
}
