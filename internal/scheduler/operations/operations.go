package operations

import (
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
)

// Operations are the seed's API: what people call to create, change,
// deploy, stop, roll back and look at environments. Each is a few reads
// and one CAS write (or batch); the controller does the rest.
type Operations struct {
	API resource.API
	// Cache is the controllers' cache, which a diff asks who holds host
	// ports on an instance while this server leads; nil: the store.
	Cache *controller.Cache
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (o *Operations) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Spec is what people write of an environment.
type Spec struct {
	Name           string
	Type           string
	TaskDefinition string
	InstanceGroup  *pbscheduler.InstanceGroup
	Deployment     *pbscheduler.DeploymentConfig
	Role           string
}

// EnvironmentResult is what create and update return.
type EnvironmentResult struct {
	Environment *pbresource.Resource
	Version     string
	Unchanged   bool
}
