package scheduler

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// A Deployment has two writers, each with its own part: its data is the
// request (what to deploy, and a user's stop), written by the operations;
// its status[StatusKey] is the scheduler's progress (a
// DeploymentProgress), written by the controller alone. Neither writes the
// other's part, so generation moves only when a user asks for something,
// and a stop is never lost under a progress write nor the other way round:
// both are compare-and-swaps on the version they read, and whoever read
// before the other wrote decides again. Every reader sees the two through
// MergeDeployment.

// Who asks a deployment to stop (DeploymentStop.by).
const (
	StopByUser              = "user"
	StopByEnvironmentDelete = "environment delete"
)

// StopByDeployment is DeploymentStop.by of a pending deployment that the
// newer user deployment id replaced.
func StopByDeployment(id string) string { return "deployment " + id }

// DeploymentOf is the deployment as every reader sees it: d, res's data
// decoded (a cache's, say), merged with the scheduler's progress in
// status["daemon-scheduler"] of res by MergeDeployment. A progress that
// does not decode is left out, as none. The result may share parts with d
// and must not be changed.
func DeploymentOf(res *pbresource.Resource, d *pbscheduler.Deployment) *pbscheduler.Deployment {
	var pr *pbscheduler.DeploymentProgress
	if data := res.GetStatus()[StatusKey].GetData(); data != nil {
		pr = &pbscheduler.DeploymentProgress{}
		if err := data.UnmarshalTo(pr); err != nil {
			pr = nil
		}
	}
	return MergeDeployment(d, pr)
}

// DecodeDeployment decodes res's data and merges the scheduler's progress
// into it (DeploymentOf).
func DecodeDeployment(res *pbresource.Resource) (*pbscheduler.Deployment, error) {
	d, err := resource.DecodeData[*pbscheduler.Deployment](res)
	if err != nil {
		return nil, err
	}
	return DeploymentOf(res, d), nil
}

// MergeDeployment is the one view of a deployment, from its request d and
// the scheduler's progress pr (nil: none reported yet). It is pure:
//
//   - the progress is pr's; with none, the progress fields of d when it was
//     stored before they moved to the status (d.status is set), else the
//     state it is created in: a user deployment pending (with the reason
//     of an auto_rollback), a new-instance or health-repair one in
//     progress since it was created;
//   - a stop in d ends a deployment whose progress has not ended: canceled
//     when it is pending, stopped when in progress, with the stop's reason
//     and time. A progress that has ended stands: it ended before the stop
//     was written, since a stop is written only over a deployment read
//     not ended, at the version read.
//
// It returns d itself when nothing changes (an old deployment, as
// stored), else a new message that shares parts with d and pr.
func MergeDeployment(d *pbscheduler.Deployment, pr *pbscheduler.DeploymentProgress) *pbscheduler.Deployment {
	if pr == nil {
		if d.GetStatus() != "" {
			if d.GetStop() == nil || DeploymentDone(d.GetStatus()) {
				return d
			}
			pr = ProgressOf(d)
		} else {
			pr = createdProgress(d)
		}
	}
	out := withProgress(d, pr)
	if stop := d.GetStop(); stop != nil && !DeploymentDone(out.Status) {
		out.Status = StatusStopped
		if pr.GetStatus() == StatusPending {
			out.Status = StatusCanceled
		}
		out.StatusReason, out.EndTime = stop.GetReason(), stop.GetAt()
	}
	return out
}

// createdProgress is the progress of a deployment the scheduler has not
// reported on: the state it is created in.
func createdProgress(d *pbscheduler.Deployment) *pbscheduler.DeploymentProgress {
	if d.GetType() != DeploymentUser {
		// The scheduler creates these as it places their tasks.
		return &pbscheduler.DeploymentProgress{Status: StatusInProgress, StartTime: d.GetCreatedAt(), LastProgressAt: d.GetCreatedAt()}
	}
	pr := &pbscheduler.DeploymentProgress{Status: StatusPending}
	if of := d.GetRollbackOf(); of != "" && of != RollbackByUser {
		pr.StatusReason = AutoRollbackReason(of)
	}
	return pr
}

// RollbackByUser is Deployment.rollback_of of a RollbackDeployment.
const RollbackByUser = "user"

// AutoRollbackReason is the status reason of the pending deployment
// auto_rollback starts after deployment failed did.
func AutoRollbackReason(failed string) string {
	return "auto_rollback after deployment " + failed + " failed"
}

// withProgress is d's request with pr's progress.
func withProgress(d *pbscheduler.Deployment, pr *pbscheduler.DeploymentProgress) *pbscheduler.Deployment {
	return &pbscheduler.Deployment{
		// The request.
		Environment:    d.GetEnvironment(),
		Version:        d.GetVersion(),
		VersionNumber:  d.GetVersionNumber(),
		TaskDefinition: d.GetTaskDefinition(),
		Type:           d.GetType(),
		CreatedAt:      d.GetCreatedAt(),
		RollbackOf:     d.GetRollbackOf(),
		Stop:           d.GetStop(),
		// The progress.
		Status:                pr.GetStatus(),
		StatusReason:          pr.GetStatusReason(),
		StartTime:             pr.GetStartTime(),
		EndTime:               pr.GetEndTime(),
		LastProgressAt:        pr.GetLastProgressAt(),
		Total:                 pr.GetTotal(),
		Complete:              pr.GetComplete(),
		Failed:                pr.GetFailed(),
		Blocked:               pr.GetBlocked(),
		Instances:             pr.GetInstances(),
		BatchSize:             pr.GetBatchSize(),
		RollbackDeployment:    pr.GetRollbackDeployment(),
		RollbackVersionNumber: pr.GetRollbackVersionNumber(),
	}
}

// ProgressOf is the progress part of a deployment as a reader sees it:
// what the controller reports after it changed it. It shares parts with d.
func ProgressOf(d *pbscheduler.Deployment) *pbscheduler.DeploymentProgress {
	return &pbscheduler.DeploymentProgress{
		Status:                d.GetStatus(),
		StatusReason:          d.GetStatusReason(),
		StartTime:             d.GetStartTime(),
		EndTime:               d.GetEndTime(),
		LastProgressAt:        d.GetLastProgressAt(),
		Total:                 d.GetTotal(),
		Complete:              d.GetComplete(),
		Failed:                d.GetFailed(),
		Blocked:               d.GetBlocked(),
		Instances:             d.GetInstances(),
		BatchSize:             d.GetBatchSize(),
		RollbackDeployment:    d.GetRollbackDeployment(),
		RollbackVersionNumber: d.GetRollbackVersionNumber(),
	}
}

// RequestOf is the request part of a deployment's stored data: d without
// the progress fields that a deployment stored before the split carried.
func RequestOf(d *pbscheduler.Deployment) *pbscheduler.Deployment {
	return withProgress(d, nil)
}

// ShowDeployment is res as the deployment operations answer it: its data
// is the merged deployment (DecodeDeployment), so that what users read of
// a deployment is what it was before the progress moved to the status.
func ShowDeployment(res *pbresource.Resource) (*pbresource.Resource, error) {
	d, err := DecodeDeployment(res)
	if err != nil {
		return nil, err
	}
	data, err := anypb.New(d)
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: res.GetId(), Owner: res.GetOwner(), Version: res.GetVersion(), Generation: res.GetGeneration(),
		Metadata: res.GetMetadata(), Data: data, Status: res.GetStatus()}, nil
}

// validateDeploymentProgress checks a DeploymentProgress before the
// resource service stores it.
func validateDeploymentProgress(m proto.Message) error {
	pr := m.(*pbscheduler.DeploymentProgress)
	if !isDeploymentStatus(pr.GetStatus()) {
		return resource.NewFieldError("status", "is not a deployment status (got %q)", pr.GetStatus())
	}
	if n := len(pr.GetInstances()); n > MaxListedInstances {
		return resource.NewFieldError("instances", "lists %d instances, over the limit of %d", n, MaxListedInstances)
	}
	return nil
}

func isDeploymentStatus(s string) bool {
	switch s {
	case StatusPending, StatusInProgress, StatusCompleted, StatusStopped, StatusCanceled, StatusUnhealthy, StatusTimedOut:
		return true
	}
	return false
}
