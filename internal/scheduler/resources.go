package scheduler

import (
	"crypto/rand"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// StoredDeployment is a deployment as stored: the resource, for its id
// and version (a CAS), and the deployment as readers see it (its data
// merged with the scheduler's progress: DeploymentOf), which must not be
// changed.
type StoredDeployment struct {
	Res  *pbresource.Resource
	Data *pbscheduler.Deployment
}

// deploymentIDs makes deployment ids: lowercase ULIDs, monotonic within a
// millisecond, so that names sort by creation.
var deploymentIDs = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
}{entropy: ulid.Monotonic(rand.Reader, 0)}

// NewDeploymentID is the id of a deployment created at now.
func NewDeploymentID(now time.Time) (string, error) {
	deploymentIDs.Lock()
	defer deploymentIDs.Unlock()
	id, err := ulid.New(ulid.Timestamp(now), deploymentIDs.entropy)
	if err != nil {
		return "", err
	}
	return strings.ToLower(id.String()), nil
}

// NewResource is a resource id, owned by owner, carrying m; its version
// is left to the caller (create-only or a CAS).
func NewResource(id, owner *pbresource.ID, m proto.Message) (*pbresource.Resource, error) {
	data, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: id, Owner: owner, Data: data}, nil
}

// WithData is res (its id, owner and version: a CAS) carrying m.
func WithData(res *pbresource.Resource, m proto.Message) (*pbresource.Resource, error) {
	data, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: res.GetId(), Owner: res.GetOwner(), Version: res.GetVersion(), Metadata: res.GetMetadata(), Data: data}, nil
}

// WithDeployment is res (a CAS on its version) with its deployment's
// data, the request as stored, changed by f.
func WithDeployment(res *pbresource.Resource, f func(*pbscheduler.Deployment)) (*pbresource.Resource, error) {
	d, err := resource.DecodeData[*pbscheduler.Deployment](res)
	if err != nil {
		return nil, err
	}
	f(d)
	return WithData(res, d)
}

// ReportProgress is the write of the scheduler's progress of deployment
// res: the progress part of next (ProgressOf), under status[StatusKey],
// a CAS on the version of res, so that a stop written since is seen
// before anything is reported over it.
func ReportProgress(res *pbresource.Resource, next *pbscheduler.Deployment) (*pbresource.WriteStatusRequest, error) {
	data, err := anypb.New(ProgressOf(next))
	if err != nil {
		return nil, err
	}
	return &pbresource.WriteStatusRequest{Id: res.GetId(), Version: res.GetVersion(), Key: StatusKey,
		Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: data}}, nil
}
