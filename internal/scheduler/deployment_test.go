package scheduler

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// TestMergeDeployment: the one view of a deployment, from its request and
// the scheduler's progress, for deployments written before the progress
// moved to the status (old) and after.
func TestMergeDeployment(t *testing.T) {
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(time.Unix(1_700_000_000+int64(s), 0)) }
	user := &pbscheduler.Deployment{Environment: "web", Version: "v2", VersionNumber: 2, TaskDefinition: "web:2", Type: DeploymentUser, CreatedAt: at(0)}
	with := func(d *pbscheduler.Deployment, f func(*pbscheduler.Deployment)) *pbscheduler.Deployment {
		c := proto.Clone(d).(*pbscheduler.Deployment)
		f(c)
		return c
	}
	stop := &pbscheduler.DeploymentStop{At: at(9), By: StopByUser, Reason: "stopped by a user"}
	running := &pbscheduler.DeploymentProgress{Status: StatusInProgress, StartTime: at(1), LastProgressAt: at(5), Total: 3, Complete: 1, BatchSize: 1,
		Instances: []*pbscheduler.InstanceProgress{{Instance: "i2", State: StateStarting, Task: "web-i2-2"}}}
	completed := &pbscheduler.DeploymentProgress{Status: StatusCompleted, StatusReason: "3/3 complete", StartTime: at(1), EndTime: at(8), LastProgressAt: at(8), Total: 3, Complete: 3}
	// A deployment as the previous version stored it: its progress in its data.
	old := with(user, func(d *pbscheduler.Deployment) {
		d.Status, d.StartTime, d.LastProgressAt, d.Total, d.Complete, d.BatchSize = StatusInProgress, at(1), at(5), 3, 1, 1
		d.Instances = running.Instances
	})
	for _, tc := range []struct {
		name string
		d    *pbscheduler.Deployment
		pr   *pbscheduler.DeploymentProgress
		want *pbscheduler.Deployment
		same bool // the request itself comes back
	}{
		{name: "a user deployment not yet started is pending", d: user,
			want: with(user, func(d *pbscheduler.Deployment) { d.Status = StatusPending })},
		{name: "an auto_rollback says why it is pending", d: with(user, func(d *pbscheduler.Deployment) { d.RollbackOf = "01failed" }),
			want: with(user, func(d *pbscheduler.Deployment) {
				d.RollbackOf, d.Status, d.StatusReason = "01failed", StatusPending, "auto_rollback after deployment 01failed failed"
			})},
		{name: "a user's rollback is pending with no reason", d: with(user, func(d *pbscheduler.Deployment) { d.RollbackOf = RollbackByUser }),
			want: with(user, func(d *pbscheduler.Deployment) { d.RollbackOf, d.Status = RollbackByUser, StatusPending })},
		{name: "a monitor deployment is in progress from its creation", d: with(user, func(d *pbscheduler.Deployment) { d.Type = DeploymentHealthRepair }),
			want: with(user, func(d *pbscheduler.Deployment) {
				d.Type, d.Status, d.StartTime, d.LastProgressAt = DeploymentHealthRepair, StatusInProgress, at(0), at(0)
			})},
		{name: "the progress reported", d: user, pr: running,
			want: with(user, func(d *pbscheduler.Deployment) {
				d.Status, d.StartTime, d.LastProgressAt, d.Total, d.Complete, d.BatchSize, d.Instances = StatusInProgress, at(1), at(5), 3, 1, 1, running.Instances
			})},
		{name: "a stop cancels a pending deployment", d: with(user, func(d *pbscheduler.Deployment) { d.Stop = stop }),
			want: with(user, func(d *pbscheduler.Deployment) {
				d.Stop, d.Status, d.StatusReason, d.EndTime = stop, StatusCanceled, "stopped by a user", at(9)
			})},
		{name: "a stop ends a deployment in progress, its progress kept", d: with(user, func(d *pbscheduler.Deployment) { d.Stop = stop }), pr: running,
			want: with(user, func(d *pbscheduler.Deployment) {
				d.Stop, d.Status, d.StatusReason, d.EndTime = stop, StatusStopped, "stopped by a user", at(9)
				d.StartTime, d.LastProgressAt, d.Total, d.Complete, d.BatchSize, d.Instances = at(1), at(5), 3, 1, 1, running.Instances
			})},
		{name: "an ended progress stands over a stop", d: with(user, func(d *pbscheduler.Deployment) { d.Stop = stop }), pr: completed,
			want: with(user, func(d *pbscheduler.Deployment) {
				d.Stop, d.Status, d.StatusReason, d.StartTime, d.EndTime, d.LastProgressAt, d.Total, d.Complete = stop, StatusCompleted, "3/3 complete", at(1), at(8), at(8), 3, 3
			})},
		{name: "old: the progress in the data is read as it is", d: old, want: old, same: true},
		{name: "old: a stop ends it", d: with(old, func(d *pbscheduler.Deployment) { d.Stop = stop }),
			want: with(old, func(d *pbscheduler.Deployment) {
				d.Stop, d.Status, d.StatusReason, d.EndTime = stop, StatusStopped, "stopped by a user", at(9)
			})},
		{name: "old: ended, a stop changes nothing", d: with(old, func(d *pbscheduler.Deployment) { d.Status, d.Stop = StatusCompleted, stop }),
			want: with(old, func(d *pbscheduler.Deployment) { d.Status, d.Stop = StatusCompleted, stop }), same: true},
		{name: "old: the progress reported since replaces the data's", d: old, pr: completed,
			want: with(user, func(d *pbscheduler.Deployment) {
				d.Status, d.StatusReason, d.StartTime, d.EndTime, d.LastProgressAt, d.Total, d.Complete = StatusCompleted, "3/3 complete", at(1), at(8), at(8), 3, 3
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.d)
			got := MergeDeployment(tc.d, tc.pr)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
			if (got == tc.d) != tc.same {
				t.Fatalf("returned the request itself: %v, want %v", got == tc.d, tc.same)
			}
			if !proto.Equal(tc.d, before) {
				t.Fatal("the request was changed")
			}
		})
	}
}

// TestDeploymentOfReadsTheStatusKey: DeploymentOf and DecodeDeployment
// merge what status["daemon-scheduler"] holds, and leave out a payload
// that does not decode (as none).
func TestDeploymentOfReadsTheStatusKey(t *testing.T) {
	d := &pbscheduler.Deployment{Environment: "web", Version: "v1", Type: DeploymentUser}
	data, _ := anypb.New(d)
	pr, _ := anypb.New(&pbscheduler.DeploymentProgress{Status: StatusCompleted, Total: 2, Complete: 2})
	res := &pbresource.Resource{Id: DeploymentID("default", "01a"), Data: data, Status: map[string]*pbresource.Status{StatusKey: {Data: pr}}}
	got, err := DecodeDeployment(res)
	if err != nil || got.GetStatus() != StatusCompleted || got.GetComplete() != 2 || got.GetEnvironment() != "web" {
		t.Fatalf("DecodeDeployment: %v, %v", got, err)
	}
	shown, err := ShowDeployment(res)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := resource.DecodeData[*pbscheduler.Deployment](shown); !proto.Equal(s, got) {
		t.Fatalf("ShowDeployment's data %v, want the merged %v", s, got)
	}
	res.Status[StatusKey].Data = data // a Deployment, not a DeploymentProgress
	if got := DeploymentOf(res, d); got.GetStatus() != StatusPending {
		t.Fatalf("with a payload that does not decode: %v, want pending", got)
	}
}

// TestDeploymentFieldsAreRequestOrProgress: every field of a Deployment is
// either the request (written by the operations) or has its namesake in
// DeploymentProgress (the scheduler's), which MergeDeployment and
// ProgressOf carry both ways: a field added to one and not the other
// fails here.
func TestDeploymentFieldsAreRequestOrProgress(t *testing.T) {
	request := map[protoreflect.Name]bool{"environment": true, "version": true, "version_number": true, "task_definition": true,
		"type": true, "created_at": true, "rollback_of": true, "stop": true}
	dfields := (&pbscheduler.Deployment{}).ProtoReflect().Descriptor().Fields()
	pfields := (&pbscheduler.DeploymentProgress{}).ProtoReflect().Descriptor().Fields()
	for i := range dfields.Len() {
		f := dfields.Get(i)
		p := pfields.ByName(f.Name())
		switch {
		case request[f.Name()] && p != nil:
			t.Errorf("%s is both the request and the progress", f.Name())
		case !request[f.Name()] && p == nil:
			t.Errorf("Deployment.%s is neither the request nor in DeploymentProgress", f.Name())
		case p != nil && (p.Kind() != f.Kind() || p.Cardinality() != f.Cardinality()):
			t.Errorf("%s differs in kind between Deployment and DeploymentProgress", f.Name())
		}
	}
	for i := range pfields.Len() {
		if dfields.ByName(pfields.Get(i).Name()) == nil {
			t.Errorf("DeploymentProgress.%s has no namesake in Deployment", pfields.Get(i).Name())
		}
	}
	// Every progress field set, and carried there and back.
	full := &pbscheduler.DeploymentProgress{Status: StatusUnhealthy, StatusReason: "r", StartTime: timestamppb.Now(), EndTime: timestamppb.Now(),
		LastProgressAt: timestamppb.Now(), Total: 1, Complete: 2, Failed: 3, Blocked: 4, Instances: []*pbscheduler.InstanceProgress{{Instance: "i"}},
		BatchSize: 5, RollbackDeployment: "rb", RollbackVersionNumber: 6}
	set := 0
	full.ProtoReflect().Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool { set++; return true })
	if set != pfields.Len() {
		t.Fatalf("the test sets %d of the %d progress fields: set the new ones", set, pfields.Len())
	}
	req := &pbscheduler.Deployment{Environment: "e", Version: "v", VersionNumber: 1, TaskDefinition: "t:1", Type: DeploymentUser,
		CreatedAt: timestamppb.Now(), RollbackOf: "x", Stop: &pbscheduler.DeploymentStop{Reason: "r"}}
	merged := MergeDeployment(req, full)
	if got := ProgressOf(merged); !proto.Equal(got, full) {
		t.Fatalf("ProgressOf(MergeDeployment(d, pr)) = %v, want pr %v", got, full)
	}
	if got := RequestOf(merged); !proto.Equal(got, req) {
		t.Fatalf("RequestOf(MergeDeployment(d, pr)) = %v, want d %v", got, req)
	}
}

// TestDeploymentProgressIsTheControllers: status["daemon-scheduler"] of a
// Deployment is declared, takes a DeploymentProgress, and is refused to
// anyone but the scheduler's controller.
func TestDeploymentProgressIsTheControllers(t *testing.T) {
	reg := resource.NewRegistry()
	Register(reg)
	r, ok := reg.Resolve(DeploymentType)
	if !ok {
		t.Fatal("Deployment is not registered")
	}
	decl, ok := r.Statuses[StatusKey]
	if !ok || decl.Owner.Controller != StatusKey {
		t.Fatalf("status[%s] of a Deployment: declared %v, owner %v; want the controller %s", StatusKey, ok, decl.Owner, StatusKey)
	}
	if _, ok := decl.Proto.(*pbscheduler.DeploymentProgress); !ok {
		t.Fatalf("status[%s] of a Deployment takes a %T, want a DeploymentProgress", StatusKey, decl.Proto)
	}
	for _, w := range []resource.StatusWriter{{}, {Controller: "orchestrator-task"}, {Agent: "i-1"}} {
		err := resource.CheckStatusOwner(w, r, StatusKey, &pbresource.Resource{Id: DeploymentID("default", "01a")})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v writing the progress: %v, want PermissionDenied", w, err)
		}
	}
	if err := resource.CheckStatusOwner(resource.StatusWriter{Controller: StatusKey}, r, StatusKey, nil); err != nil {
		t.Fatalf("the controller writing its progress: %v", err)
	}
	if err := validateDeploymentProgress(&pbscheduler.DeploymentProgress{Status: "done"}); err == nil {
		t.Fatal("a progress with an unknown status was accepted")
	}
}
