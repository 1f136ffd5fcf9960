package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// deployed5000 is a harness with an environment deployed to 5,000
// instances, every task running.
func deployed5000(b *testing.B) *schedulertest.Harness {
	t := &testing.T{}
	h := schedulertest.New(t)
	h.T = t
	for i := range 5000 {
		h.Instance(fmt.Sprintf("i%04d", i), map[string]string{"role": "logger"})
	}
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		b.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	if n := len(h.Live()); n != 5000 {
		b.Fatalf("%d live tasks", n)
	}
	return h
}

// BenchmarkReconcileSteady5000 is one reconcile of an environment whose
// 5,000 instances all run their task: the cost the scheduler pays on
// every change once deployed (reading the world and planning).
func BenchmarkReconcileSteady5000(b *testing.B) {
	h := deployed5000(b)
	req := controller.Request{ID: scheduler.EnvironmentID("default", "ls")}
	b.ResetTimer()
	for b.Loop() {
		if err := h.Ctl.Reconciler.Reconcile(h.Ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReconcileAfterAReport5000 is one task's report and the
// reconcile it causes, in the same environment: the scheduler's cost per
// report while a fleet's tasks report (a rollout, health changes).
func BenchmarkReconcileAfterAReport5000(b *testing.B) {
	h := deployed5000(b)
	list, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		b.Fatal(err)
	}
	res := list.GetResources()[0]
	req := controller.Request{ID: scheduler.EnvironmentID("default", "ls")}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		st := proto.Clone(orchestrator.TaskStatusOf(res)).(*pborch.TaskStatus)
		st.ReportedAt = timestamppb.New(h.Clock.Now().Add(time.Duration(i)))
		res = h.Report(res, st)
		if err := h.Ctl.Reconciler.Reconcile(h.Ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
