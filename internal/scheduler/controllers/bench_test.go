package controllers_test

import (
	"fmt"
	"testing"

	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// BenchmarkReconcileSteady5000 is one reconcile of an environment whose
// 5,000 instances all run their task: the cost the scheduler pays on
// every change once deployed (reading the world and planning).
func BenchmarkReconcileSteady5000(b *testing.B) {
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
	req := controller.Request{ID: scheduler.EnvironmentID("default", "ls")}
	b.ResetTimer()
	for b.Loop() {
		if err := h.Ctl.Reconciler.Reconcile(h.Ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
