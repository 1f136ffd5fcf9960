package operations_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/operations"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// TestOperationsRefuseBadInput checks each refusal the issue names: a
// clear message, and nothing written.
func TestOperationsRefuseBadInput(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	h.TaskDefinition("other", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("web", "other:1", 75, "", "role=web")); err != nil {
		t.Fatal(err)
	}
	webVersion := h.Env("web").GetLatestVersion()
	before := h.Fingerprint()

	mhp := func(p int32) operations.Spec {
		s := schedulertest.Spec("x", td, 0, "")
		s.Deployment.MinHealthyPercent = proto.Int32(p)
		return s
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		want string
	}{
		{"unknown task definition", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("x", "nope:3", 75, ""))
			return err
		}, codes.InvalidArgument, "task_definition: task definition nope:3 is not registered"},
		{"no revision", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("x", "ls", 75, ""))
			return err
		}, codes.InvalidArgument, "task_definition: \"ls\" names no revision"},
		{"empty filter", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("x", "other:1", 75, "", ""))
			return err
		}, codes.InvalidArgument, "instance_group.attributes[0]: is empty"},
		{"malformed filter", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("x", "other:1", 75, "", "role=web", "zone in a,b"))
			return err
		}, codes.InvalidArgument, "instance_group.attributes[1]: \"zone in a,b\": the values must be in parentheses"},
		{"min_healthy_percent over 100", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", mhp(101))
			return err
		}, codes.InvalidArgument, "deployment.min_healthy_percent: must be from 0 to 100 (got 101)"},
		{"min_healthy_percent under 0", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", mhp(-1))
			return err
		}, codes.InvalidArgument, "deployment.min_healthy_percent: must be from 0 to 100 (got -1)"},
		{"bad duration", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("x", "other:1", 75, "soon", "role=x"))
			return err
		}, codes.InvalidArgument, "deployment.min_healthy_time: \"soon\" is not a duration"},
		{"overlapping daemons of one task definition", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("x", td, 75, "", "zone=a"))
			return err
		}, codes.InvalidArgument, "instance_group: can overlap the instance group of environment ls"},
		{"an existing name", func() error {
			_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", "other:1", 75, "", "role=nobody"))
			return err
		}, codes.AlreadyExists, "environment ls already exists"},
		{"a version of another environment", func() error {
			_, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", webVersion)
			return err
		}, codes.InvalidArgument, "is a version of environment web, not of ls"},
		{"a version number that does not exist", func() error {
			_, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", "7")
			return err
		}, codes.InvalidArgument, "environment ls has no version number 7"},
		{"rollback with no earlier version", func() error {
			_, err := h.Ops.RollbackDeployment(h.Ctx, "default", "ls", "")
			return err
		}, codes.FailedPrecondition, "there is no earlier version to roll back to"},
		{"update without a task definition", func() error {
			_, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{InstanceGroup: &pbscheduler.InstanceGroup{}})
			return err
		}, codes.InvalidArgument, "task_definition: is required"},
		{"an unknown environment", func() error {
			_, err := h.Ops.StartDeployment(h.Ctx, "default", "nope", "")
			return err
		}, codes.NotFound, "environment nope not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schedulertest.RequireCode(t, tc.call(), tc.code, tc.want)
			if h.Fingerprint() != before {
				t.Fatal("a refused operation wrote something")
			}
		})
	}
}

func TestStaleVersionIsAConflict(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	created, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", v1, 75, ""))
	if err != nil {
		t.Fatal(err)
	}
	updated, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2})
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2})
	if err != nil || !again.Unchanged || again.Version != updated.Version {
		t.Fatalf("an unchanged update: %+v, %v; want the same version, unchanged", again, err)
	}
	_, err = h.Ops.StartDeployment(h.Ctx, "default", "ls", created.Version)
	schedulertest.RequireCode(t, err, codes.Aborted, "is stale")
	if _, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", "2"); err != nil {
		t.Fatalf("deploying the latest by number: %v", err)
	}
	// A newer StartDeployment cancels the pending one.
	second, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", "")
	if err != nil {
		t.Fatal(err)
	}
	deps := h.DeploymentsOf("ls")
	if len(deps) != 2 || deps[1].GetStatus() != scheduler.StatusCanceled || deps[0].GetStatus() != scheduler.StatusPending {
		t.Fatalf("deployments %v, want the first canceled and the second pending", deps)
	}
	_ = second
}

// Two overlapping environments of one task definition, created at once:
// the second to write finds the first when it checks again, and is
// refused. Without the compare that the environments are unchanged
// since the checks, both checks passed before either wrote.
func TestConcurrentOverlappingCreatesCannotBothPass(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	other := &operations.Operations{API: h.API, Now: h.Clock.Now}
	slipIn := &writeHook{API: h.API}
	h.Ops.API = slipIn
	var otherErr error
	ran := false
	slipIn.before = func() {
		if ran {
			return
		}
		ran = true
		// Between the first create's checks and its write, another one
		// of an overlapping group runs whole.
		_, otherErr = other.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("b", td, 75, "", "role=logger"))
	}
	_, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("a", td, 75, "", "zone=a"))
	if otherErr != nil {
		t.Fatalf("the create that went first: %v", otherErr)
	}
	schedulertest.RequireCode(t, err, codes.InvalidArgument, "can overlap the instance group of environment b")
	if _, err := h.Ops.GetEnvironment(h.Ctx, "default", "a"); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused environment: %v, want NotFound", err)
	}

	// Updates are checked the same way.
	slipIn.before = nil
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("c", td, 75, "", "role=web")); err != nil {
		t.Fatal(err)
	}
	ran = false
	slipIn.before = func() {
		if ran {
			return
		}
		ran = true
		_, otherErr = other.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("d", td, 75, "", "role=cache"))
	}
	_, err = h.Ops.UpdateEnvironment(h.Ctx, "default", "c", operations.Spec{TaskDefinition: td, InstanceGroup: &pbscheduler.InstanceGroup{Attributes: []string{"role in (web,cache)"}}})
	if otherErr != nil {
		t.Fatalf("the create that went first: %v", otherErr)
	}
	schedulertest.RequireCode(t, err, codes.InvalidArgument, "can overlap the instance group of environment d")
}

// writeHook runs before, when set, ahead of each WriteBatch: an
// operation's checks are all done by then, so a concurrent operation run
// there slips in between the checks and the write.
type writeHook struct {
	resource.API
	before func()
}

func (w *writeHook) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	if w.before != nil {
		w.before()
	}
	return w.API.WriteBatch(ctx, req)
}

// An environment and its first version are one write: both stored at the
// same version, the version owned by the environment's incarnation.
func TestCreateWritesEnvironmentAndFirstVersionAtOnce(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	created, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger"))
	if err != nil {
		t.Fatal(err)
	}
	ver, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.VersionID("default", created.Version)})
	if err != nil {
		t.Fatalf("the first version: %v", err)
	}
	env := created.Environment
	if ver.GetResource().GetVersion() != env.GetVersion() {
		t.Fatalf("environment at version %s, its first version at %s: two writes", env.GetVersion(), ver.GetResource().GetVersion())
	}
	if !proto.Equal(ver.GetResource().GetOwner(), env.GetId()) {
		t.Fatalf("the first version is owned by %v, not the environment %v", ver.GetResource().GetOwner(), env.GetId())
	}
	// It resolves as the environment's version, by uuid and by number.
	for _, v := range []string{created.Version, "1"} {
		if _, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", v); err != nil {
			t.Fatalf("deploying version %s: %v", v, err)
		}
	}
}

// An environment is written only through the operations: the generic
// write and batch refuse it, pointing at them, and write nothing.
func TestEnvironmentWrittenOnlyThroughOperations(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	created, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger"))
	if err != nil {
		t.Fatal(err)
	}
	before := h.Fingerprint()
	changed := proto.Clone(created.Environment).(*pbresource.Resource)
	changed.Metadata = map[string]string{"team": "ops"}
	_, err = h.API.Write(h.Ctx, &pbresource.WriteRequest{Resource: changed})
	schedulertest.RequireCode(t, err, codes.FailedPrecondition, "scheduler/v1/Environment is written only through its own operations (/v1/environments)")
	fresh := &pbresource.Resource{Id: scheduler.EnvironmentID("default", "sneaky"), Data: created.Environment.GetData()}
	_, err = h.API.WriteBatch(h.Ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{fresh}})
	schedulertest.RequireCode(t, err, codes.FailedPrecondition, "resources[0]: scheduler/v1/Environment is written only")
	if h.Fingerprint() != before {
		t.Fatal("a refused generic write wrote something")
	}
}

// An environment's versions and deployments are written only through the
// operations too: a version written alone would be one no environment
// asked for, and a deployment written alone skips the checks of a start
// (the version is the latest, its task definition exists).
func TestVersionsAndDeploymentsWrittenOnlyThroughOperations(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	created, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger"))
	if err != nil {
		t.Fatal(err)
	}
	ver, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.VersionID("default", created.Version)})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := h.Ops.StartDeployment(h.Ctx, "default", "ls", "")
	if err != nil {
		t.Fatal(err)
	}
	before := h.Fingerprint()
	for _, res := range []*pbresource.Resource{ver.GetResource(), dep} {
		changed := proto.Clone(res).(*pbresource.Resource)
		changed.Metadata = map[string]string{"team": "ops"}
		_, err = h.API.Write(h.Ctx, &pbresource.WriteRequest{Resource: changed})
		schedulertest.RequireCode(t, err, codes.FailedPrecondition, "is written only through its own operations (/v1/environments)")
		fresh := &pbresource.Resource{Id: proto.Clone(res.GetId()).(*pbresource.ID), Owner: res.GetOwner(), Data: res.GetData()}
		fresh.Id.Name, fresh.Id.Uid = "sneaky", ""
		_, err = h.API.WriteBatch(h.Ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{fresh}})
		schedulertest.RequireCode(t, err, codes.FailedPrecondition, "resources[0]: "+ids.TypeString(res.GetId().GetType())+" is written only")
	}
	if h.Fingerprint() != before {
		t.Fatal("a refused generic write wrote something")
	}
}

// reportingAPI is the resource API with the scheduler reporting an
// environment's status just before each of the next n WriteBatch calls
// lands: the race a user's deploy meets while a deployment starts or ends.
type reportingAPI struct {
	resource.API
	t      *testing.T
	env    *pbresource.ID
	n      int
	health []string
}

func (r *reportingAPI) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	if r.n > 0 {
		r.n--
		data, err := anypb.New(&pbscheduler.EnvironmentStatus{Status: scheduler.EnvInactive, Health: r.health[r.n%len(r.health)]})
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := r.API.WriteStatus(resource.AsController(ctx, scheduler.StatusKey), &pbresource.WriteStatusRequest{Id: r.env, Key: scheduler.StatusKey, Status: &pbresource.Status{ObservedGeneration: 1, Data: data}}); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.API.WriteBatch(ctx, req)
}

// TestDeployDoesNotCompeteWithTheScheduler: the scheduler's status writes
// move the environment's version, not its generation; a deploy that
// meets them makes its deployment again rather than fail, and fails only
// when a user changed the environment meanwhile.
func TestDeployDoesNotCompeteWithTheScheduler(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", v1, 75, "")); err != nil {
		t.Fatal(err)
	}
	racing := &reportingAPI{API: h.API, t: t, env: scheduler.EnvironmentID("default", "ls"), n: 2, health: []string{scheduler.HealthHealthy, scheduler.HealthUnhealthy}}
	ops := &operations.Operations{API: racing, Now: h.Clock.Now}
	d, err := ops.StartDeployment(h.Ctx, "default", "ls", "")
	if err != nil {
		t.Fatalf("a deploy racing two status reports: %v", err)
	}
	if racing.n != 0 {
		t.Fatalf("%d status reports did not race the deploy", racing.n)
	}
	if deps := h.DeploymentsOf("ls"); len(deps) != 1 || deps[0].GetStatus() != scheduler.StatusPending {
		t.Fatalf("deployments %v, want the one pending deployment %s", deps, d.GetId().GetName())
	}

	// A user's update between the read and the write is a conflict.
	user := &updatingAPI{API: h.API, update: func() {
		if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
			t.Fatal(err)
		}
	}}
	_, err = (&operations.Operations{API: user, Now: h.Clock.Now}).StartDeployment(h.Ctx, "default", "ls", "")
	schedulertest.RequireCode(t, err, codes.Aborted, "environment ls changed while the deployment was being made")
}

// updatingAPI runs update once, just before the first WriteBatch.
type updatingAPI struct {
	resource.API
	update func()
}

func (u *updatingAPI) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	if u.update != nil {
		f := u.update
		u.update = nil
		f()
	}
	return u.API.WriteBatch(ctx, req)
}

// The scheduler reporting on another environment of the namespace moves
// what a create's compare looks at; the create checks again and goes
// through rather than fail.
func TestCreateRechecksPastStatusReports(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("a", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	racing := &reportingAPI{API: h.API, t: t, env: scheduler.EnvironmentID("default", "a"), n: 3, health: []string{scheduler.HealthHealthy, scheduler.HealthUnhealthy}}
	ops := &operations.Operations{API: racing, Now: h.Clock.Now}
	if _, err := ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("b", td, 75, "", "role=web")); err != nil {
		t.Fatalf("a create racing three status reports: %v", err)
	}
	if racing.n != 0 {
		t.Fatalf("%d status reports did not race the create", racing.n)
	}
	if got := h.Env("b").GetVersionCount(); got != 1 {
		t.Fatalf("environment b has %d versions, want 1", got)
	}
}
