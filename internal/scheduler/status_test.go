package scheduler

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
)

func stored(id, typ, status, version string, number int64) *StoredDeployment {
	return &StoredDeployment{
		Res:  &pbresource.Resource{Id: DeploymentID("default", id)},
		Data: &pbscheduler.Deployment{Type: typ, Status: status, Version: version, VersionNumber: number, TaskDefinition: "ls:" + version},
	}
}

// TestReportStatus: the environment's status is what its deployments
// say, whatever the status last written, so a run that ended between its
// writes leaves nothing a later run does not repair.
func TestReportStatus(t *testing.T) {
	active := func(dep, version string, number int64) *pbscheduler.EnvironmentStatus {
		return &pbscheduler.EnvironmentStatus{Status: EnvActive, Health: HealthHealthy, ActiveDeployment: dep,
			DesiredVersion: version, DesiredVersionNumber: number, DesiredTaskDefinition: "ls:" + version}
	}
	with := func(st *pbscheduler.EnvironmentStatus, f func(*pbscheduler.EnvironmentStatus)) *pbscheduler.EnvironmentStatus {
		st = proto.Clone(st).(*pbscheduler.EnvironmentStatus)
		f(st)
		return st
	}
	versions := map[string]*pbscheduler.EnvironmentVersion{"v1": {Number: 1}, "v2": {Number: 2}}
	for _, tc := range []struct {
		name string
		cur  *pbscheduler.EnvironmentStatus
		deps []*StoredDeployment
		want *pbscheduler.EnvironmentStatus
	}{
		{"never reported, nothing deployed", &pbscheduler.EnvironmentStatus{}, nil,
			&pbscheduler.EnvironmentStatus{Status: EnvInactive, Health: HealthHealthy}},
		{"a pending deployment is not yet anything", &pbscheduler.EnvironmentStatus{},
			[]*StoredDeployment{stored("d1", DeploymentUser, StatusPending, "v1", 1)},
			&pbscheduler.EnvironmentStatus{Status: EnvInactive, Health: HealthHealthy}},
		{"a started deployment becomes the active one", &pbscheduler.EnvironmentStatus{},
			[]*StoredDeployment{stored("d1", DeploymentUser, StatusInProgress, "v1", 1)},
			active("d1", "v1", 1)},
		{"monitors are never the active one", &pbscheduler.EnvironmentStatus{},
			[]*StoredDeployment{stored("d1", DeploymentNewInstance, StatusInProgress, "v1", 1)},
			&pbscheduler.EnvironmentStatus{Status: EnvInactive, Health: HealthHealthy}},
		{"the newest started one is adopted", &pbscheduler.EnvironmentStatus{},
			[]*StoredDeployment{stored("d1", DeploymentUser, StatusInProgress, "v1", 1), stored("d2", DeploymentUser, StatusInProgress, "v2", 2)},
			active("d2", "v2", 2)},
		{"in progress: kept", active("d1", "v1", 1),
			[]*StoredDeployment{stored("d1", DeploymentUser, StatusInProgress, "v1", 1)},
			active("d1", "v1", 1)},
		{"completed: healthy, last completed", with(active("d1", "v1", 1), func(s *pbscheduler.EnvironmentStatus) { s.Health = HealthUnhealthy }),
			[]*StoredDeployment{stored("d1", DeploymentUser, StatusCompleted, "v1", 1)},
			with(active("", "v1", 1), func(s *pbscheduler.EnvironmentStatus) { s.LastCompletedVersion, s.LastCompletedVersionNumber = "v1", 1 })},
		{"unhealthy: unhealthy, still active", active("d2", "v2", 2),
			[]*StoredDeployment{stored("d2", DeploymentUser, StatusUnhealthy, "v2", 2)},
			with(active("", "v2", 2), func(s *pbscheduler.EnvironmentStatus) { s.Health = HealthUnhealthy })},
		{"timed out: unhealthy", active("d2", "v2", 2),
			[]*StoredDeployment{stored("d2", DeploymentUser, StatusTimedOut, "v2", 2)},
			with(active("", "v2", 2), func(s *pbscheduler.EnvironmentStatus) { s.Health = HealthUnhealthy })},
		{"stopped: inactive", active("d2", "v2", 2),
			[]*StoredDeployment{stored("d2", DeploymentUser, StatusStopped, "v2", 2)},
			with(active("", "v2", 2), func(s *pbscheduler.EnvironmentStatus) { s.Status = EnvInactive })},
		{"ended, and the next one already started", active("d1", "v1", 1),
			[]*StoredDeployment{stored("d1", DeploymentUser, StatusStopped, "v1", 1), stored("d2", DeploymentUser, StatusInProgress, "v2", 2)},
			active("d2", "v2", 2)},
		{"gone (collected): no longer active", active("d1", "v1", 1), nil,
			active("", "v1", 1)},
		{"numbers filled in from the versions", &pbscheduler.EnvironmentStatus{Status: EnvActive, Health: HealthHealthy, DesiredVersion: "v2", LastCompletedVersion: "v1"}, nil,
			&pbscheduler.EnvironmentStatus{Status: EnvActive, Health: HealthHealthy, DesiredVersion: "v2", DesiredVersionNumber: 2, LastCompletedVersion: "v1", LastCompletedVersionNumber: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.cur)
			got := ReportStatus(tc.cur, tc.deps, versions)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
			if !proto.Equal(tc.cur, before) {
				t.Fatal("ReportStatus changed its input")
			}
		})
	}
}

func TestEnvironmentStatusOf(t *testing.T) {
	st, err := EnvironmentStatusOf(&pbresource.Resource{})
	if err != nil || st.GetStatus() != EnvInactive || st.GetHealth() != HealthHealthy || st.GetDesiredVersion() != "" {
		t.Fatalf("no status: %v, %v; want inactive and healthy", st, err)
	}
	data, _ := anypb.New(&pbscheduler.EnvironmentStatus{Status: EnvActive, Health: HealthUnhealthy, DesiredVersion: "v1"})
	st, err = EnvironmentStatusOf(&pbresource.Resource{Status: map[string]*pbresource.Status{StatusKey: {Data: data}}})
	if err != nil || st.GetStatus() != EnvActive || st.GetHealth() != HealthUnhealthy || st.GetDesiredVersion() != "v1" {
		t.Fatalf("reported: %v, %v", st, err)
	}
	wrong, _ := anypb.New(&pbscheduler.Deployment{})
	if _, err := EnvironmentStatusOf(&pbresource.Resource{Status: map[string]*pbresource.Status{StatusKey: {Data: wrong}}}); err == nil {
		t.Fatal("a payload of another message decoded")
	}
}

func TestValidateEnvironmentStatus(t *testing.T) {
	for _, tc := range []struct {
		st   *pbscheduler.EnvironmentStatus
		want string
	}{
		{&pbscheduler.EnvironmentStatus{Status: EnvActive, Health: HealthHealthy}, ""},
		{&pbscheduler.EnvironmentStatus{Status: "running", Health: HealthHealthy}, `status: must be "active" or "inactive" (got "running")`},
		{&pbscheduler.EnvironmentStatus{Status: EnvInactive, Health: "ok"}, `health: must be "healthy" or "unhealthy" (got "ok")`},
	} {
		err := validateEnvironmentStatus(tc.st)
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("%v: got %v, want %q", tc.st, err, tc.want)
		}
	}
}
