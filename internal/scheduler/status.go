package scheduler

import (
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// StatusKey is the key of the scheduler's entry in an Environment's
// status (the name of its controller), whose payload is an
// EnvironmentStatus. The controller alone writes it.
const StatusKey = "daemon-scheduler"

// EnvironmentStatusOf decodes what the scheduler reports of an
// environment. One it has not reported on yet is inactive and healthy,
// with nothing deployed.
func EnvironmentStatusOf(res *pbresource.Resource) (*pbscheduler.EnvironmentStatus, error) {
	st := &pbscheduler.EnvironmentStatus{}
	if data := res.GetStatus()[StatusKey].GetData(); data != nil {
		if err := data.UnmarshalTo(st); err != nil {
			return nil, resource.NewFieldError("status."+StatusKey+".data", "does not decode as %s: %v", st.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	if st.Status == "" {
		st.Status = EnvInactive
	}
	if st.Health == "" {
		st.Health = HealthHealthy
	}
	return st, nil
}

// validateEnvironmentStatus checks an EnvironmentStatus before the
// resource service stores it.
func validateEnvironmentStatus(m proto.Message) error {
	st := m.(*pbscheduler.EnvironmentStatus)
	switch st.GetStatus() {
	case EnvActive, EnvInactive:
	default:
		return resource.NewFieldError("status", "must be %q or %q (got %q)", EnvActive, EnvInactive, st.GetStatus())
	}
	switch st.GetHealth() {
	case HealthHealthy, HealthUnhealthy:
	default:
		return resource.NewFieldError("health", "must be %q or %q (got %q)", HealthHealthy, HealthUnhealthy, st.GetHealth())
	}
	return nil
}

// ReportStatus is the status an environment has given the status last
// reported and its deployments as they are now. It is the only place the
// status is decided, so that the status is always what the deployments
// say, however a run of the controller ended:
//
//   - an active deployment that has ended (or is gone) is folded in:
//     completed makes the environment healthy and its version the last
//     completed; unhealthy or timed-out makes it unhealthy; stopped (by a
//     user, or by a deletion) makes it inactive. No deployment is active
//     any more;
//   - with none active, the newest user deployment in progress becomes the
//     active one, and the environment active with its version desired.
//     The controller starts a deployment by writing it in progress, and
//     the status follows from that, written after it: a run that ends
//     between the two leaves a deployment the next run adopts;
//   - the numbers of the desired and last completed versions are filled
//     in where they are missing.
//
// cur is not changed.
func ReportStatus(cur *pbscheduler.EnvironmentStatus, deployments []*StoredDeployment, versions map[string]*pbscheduler.EnvironmentVersion) *pbscheduler.EnvironmentStatus {
	next := proto.Clone(cur).(*pbscheduler.EnvironmentStatus)
	if next.Status == "" {
		next.Status = EnvInactive
	}
	if next.Health == "" {
		next.Health = HealthHealthy
	}
	if id := next.GetActiveDeployment(); id != "" {
		d := findDeployment(deployments, id)
		switch {
		case d == nil:
			next.ActiveDeployment = "" // collected: whatever it did was folded in when it ended
		case DeploymentDone(d.Data.GetStatus()):
			foldEnded(next, d.Data)
			next.ActiveDeployment = ""
		}
	}
	if next.GetActiveDeployment() == "" {
		for i := len(deployments) - 1; i >= 0; i-- { // names are ULIDs: the newest sorts last
			d := deployments[i]
			if d.Data.GetType() != DeploymentUser || d.Data.GetStatus() != StatusInProgress {
				continue
			}
			next.Status = EnvActive
			next.ActiveDeployment = d.Res.GetId().GetName()
			next.DesiredVersion = d.Data.GetVersion()
			next.DesiredVersionNumber = d.Data.GetVersionNumber()
			next.DesiredTaskDefinition = d.Data.GetTaskDefinition()
			break
		}
	}
	if v := versions[next.GetDesiredVersion()]; v != nil && next.GetDesiredVersionNumber() == 0 {
		next.DesiredVersionNumber = v.GetNumber()
	}
	if v := versions[next.GetLastCompletedVersion()]; v != nil && next.GetLastCompletedVersionNumber() == 0 {
		next.LastCompletedVersionNumber = v.GetNumber()
	}
	return next
}

// foldEnded applies the end of the environment's active deployment d.
func foldEnded(st *pbscheduler.EnvironmentStatus, d *pbscheduler.Deployment) {
	switch d.GetStatus() {
	case StatusCompleted:
		st.Health = HealthHealthy
		st.LastCompletedVersion = d.GetVersion()
		st.LastCompletedVersionNumber = d.GetVersionNumber()
	case StatusUnhealthy, StatusTimedOut:
		st.Health = HealthUnhealthy
	case StatusStopped:
		st.Status = EnvInactive
	}
}

func findDeployment(deployments []*StoredDeployment, id string) *StoredDeployment {
	for _, d := range deployments {
		if d.Res.GetId().GetName() == id {
			return d
		}
	}
	return nil
}
