package scheduler_test

import (
	"fmt"
	"testing"

	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/scheduler"
)

// BenchmarkReconcileSteady5000 is one reconcile of an environment whose
// 5,000 instances all run their task: the cost the scheduler pays on
// every change once deployed (reading the world and planning).
func BenchmarkReconcileSteady5000(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t)
	h.t = t
	for i := range 5000 {
		h.instance(fmt.Sprintf("i%04d", i), map[string]string{"role": "logger"})
	}
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		b.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	if n := len(h.live()); n != 5000 {
		b.Fatalf("%d live tasks", n)
	}
	req := controller.Request{ID: scheduler.EnvironmentID("default", "ls")}
	b.ResetTimer()
	for b.Loop() {
		if err := h.ctl.Reconciler.Reconcile(h.ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
