// Package client is a Go client of the daemon scheduler's operations
// (docs/scheduler.md, "HTTP API"): environments, their versions and
// deployments. It sends its requests through the generic client of the
// HTTP API (internal/client) and speaks only the public JSON shapes, so
// the CLI (internal/scheduler/command), tests and benchmarks can drive a
// server from outside without linking the scheduler.
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	apiclient "trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// The daemon scheduler's operations (docs/scheduler.md, "HTTP API"). Every
// one takes the namespace of the environment ("" for the default one).
// Environments, versions and deployments come back as wire.Resources;
// the environment's state and diff as the scheduler.v1 messages.

// Client calls the scheduler's operations on a server.
type Client struct{ c *apiclient.Client }

// New is a Client that sends its requests through c, a client of the
// server's HTTP API.
func New(c *apiclient.Client) *Client { return &Client{c: c} }

// EnvironmentSpec is the body of CreateEnvironment and UpdateEnvironment:
// the spec file's shape. On an update an absent field keeps its value,
// so optional fields are pointers or omitted when zero: a nil Attributes
// is absent, an empty non-nil one clears the filters.
type EnvironmentSpec struct {
	Name           string              `json:"name,omitempty"`
	Type           string              `json:"type,omitempty"`
	TaskDefinition string              `json:"task_definition,omitempty"`
	InstanceGroup  *InstanceGroupSpec  `json:"instance_group,omitempty"`
	Deployment     *DeploymentSettings `json:"deployment,omitempty"`
	Role           string              `json:"role,omitempty"`
}

// InstanceGroupSpec selects instances: a cluster and attribute filters.
type InstanceGroupSpec struct {
	Cluster    string   `json:"cluster,omitempty"`
	Attributes []string `json:"attributes,omitzero"`
}

// DeploymentSettings say how a deployment rolls out. Durations are Go
// duration strings ("10s", "5m").
type DeploymentSettings struct {
	MinHealthyPercent *int32 `json:"min_healthy_percent,omitempty"`
	MinHealthyTime    string `json:"min_healthy_time,omitempty"`
	HealthyDeadline   string `json:"healthy_deadline,omitempty"`
	ProgressDeadline  string `json:"progress_deadline,omitempty"`
	AutoRollback      *bool  `json:"auto_rollback,omitempty"`
}

// EnvironmentWrite is the answer to CreateEnvironment and
// UpdateEnvironment: the environment, and the version the write made (or,
// when Unchanged, the latest version, which the spec already matched).
type EnvironmentWrite struct {
	Environment *wire.Resource `json:"environment"`
	Version     string         `json:"version"`
	Unchanged   bool           `json:"unchanged,omitempty"`
}

// EnvironmentInfo is the answer to GetEnvironment. Its JSON form is the
// API's.
type EnvironmentInfo struct {
	Environment      *wire.Resource
	State            *pbscheduler.EnvironmentState
	ActiveDeployment *wire.Resource // nil when none is in progress
	// DesiredVersion is the EnvironmentVersion the scheduler keeps
	// running: nil when the environment was never deployed (or the server
	// is older than the field).
	DesiredVersion *wire.Resource
}

type environmentInfoJSON struct {
	Environment      *wire.Resource  `json:"environment"`
	State            json.RawMessage `json:"state,omitempty"`
	ActiveDeployment *wire.Resource  `json:"active_deployment,omitempty"`
	DesiredVersion   *wire.Resource  `json:"desired_version,omitempty"`
}

// MarshalJSON writes the API's shape, the state as protobuf JSON.
func (i *EnvironmentInfo) MarshalJSON() ([]byte, error) {
	out := environmentInfoJSON{Environment: i.Environment, ActiveDeployment: i.ActiveDeployment, DesiredVersion: i.DesiredVersion}
	if i.State != nil {
		b, err := apiclient.MarshalProto(i.State)
		if err != nil {
			return nil, err
		}
		out.State = b
	}
	return json.Marshal(out)
}

// unmarshalProto reads a message, skipping fields of a newer server.
func unmarshalProto(b []byte, m proto.Message, what string) error {
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return fmt.Errorf("decoding the %s the server returned: %w", what, err)
	}
	return nil
}

type versionRequest struct {
	Version string `json:"version,omitempty"`
}

type deploymentResponse struct {
	Deployment *wire.Resource `json:"deployment"`
}

func (c *Client) environmentURL(namespace, name string, rest string, q url.Values) string {
	p := "/v1/environments"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	p += rest
	query := url.Values{}
	if namespace != "" {
		query.Set("namespace", namespace)
	}
	for k, v := range q {
		query[k] = v
	}
	return c.c.URL(p, query)
}

// CreateEnvironment creates an environment (inactive until its first
// deployment) and its first version.
func (c *Client) CreateEnvironment(ctx context.Context, namespace string, spec *EnvironmentSpec) (*EnvironmentWrite, error) {
	var out EnvironmentWrite
	if err := c.c.Do(ctx, http.MethodPost, c.environmentURL(namespace, "", "", nil), spec, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateEnvironment changes an environment's spec (fields absent from spec
// keep their value; the task definition is required) and makes a new
// version, unless nothing changed. It deploys nothing.
func (c *Client) UpdateEnvironment(ctx context.Context, namespace, name string, spec *EnvironmentSpec) (*EnvironmentWrite, error) {
	var out EnvironmentWrite
	if err := c.c.Do(ctx, http.MethodPut, c.environmentURL(namespace, name, "", nil), spec, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetEnvironment returns an environment, its state, its deployment in
// progress and its desired version.
func (c *Client) GetEnvironment(ctx context.Context, namespace, name string) (*EnvironmentInfo, error) {
	var raw environmentInfoJSON
	if err := c.c.Do(ctx, http.MethodGet, c.environmentURL(namespace, name, "", nil), nil, &raw); err != nil {
		return nil, err
	}
	info := &EnvironmentInfo{Environment: raw.Environment, ActiveDeployment: raw.ActiveDeployment, DesiredVersion: raw.DesiredVersion}
	if len(raw.State) > 0 && string(raw.State) != "null" {
		info.State = &pbscheduler.EnvironmentState{}
		if err := unmarshalProto(raw.State, info.State, "environment state"); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// ListEnvironments lists the environments of a namespace, of one type when
// typ is not "".
func (c *Client) ListEnvironments(ctx context.Context, namespace, typ string) ([]*wire.Resource, error) {
	q := url.Values{}
	if typ != "" {
		q.Set("type", typ)
	}
	var out struct {
		Environments []*wire.Resource `json:"environments"`
	}
	if err := c.c.Do(ctx, http.MethodGet, c.environmentURL(namespace, "", "", q), nil, &out); err != nil {
		return nil, err
	}
	return out.Environments, nil
}

// DeleteEnvironment marks an environment deleting: the scheduler stops its
// tasks, then removes it. It is refused while a user deployment is in
// progress.
func (c *Client) DeleteEnvironment(ctx context.Context, namespace, name string) (*wire.Resource, error) {
	var out struct {
		Environment *wire.Resource `json:"environment"`
	}
	if err := c.c.Do(ctx, http.MethodDelete, c.environmentURL(namespace, name, "", nil), nil, &out); err != nil {
		return nil, err
	}
	return out.Environment, nil
}

// EnvironmentStatus returns the environment's current-vs-desired state.
func (c *Client) EnvironmentStatus(ctx context.Context, namespace, name string) (*pbscheduler.EnvironmentState, error) {
	raw, err := c.getRaw(ctx, c.environmentURL(namespace, name, "/status", nil))
	if err != nil {
		return nil, err
	}
	var st pbscheduler.EnvironmentState
	if err := unmarshalProto(raw, &st, "environment state"); err != nil {
		return nil, err
	}
	return &st, nil
}

// EnvironmentDiff returns what a deployment of version (a uuid or a
// number; "" the latest) would change, instance by instance.
func (c *Client) EnvironmentDiff(ctx context.Context, namespace, name, version string) (*pbscheduler.EnvironmentDiff, error) {
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	raw, err := c.getRaw(ctx, c.environmentURL(namespace, name, "/diff", q))
	if err != nil {
		return nil, err
	}
	var d pbscheduler.EnvironmentDiff
	if err := unmarshalProto(raw, &d, "environment diff"); err != nil {
		return nil, err
	}
	return &d, nil
}

// ListVersions lists an environment's versions, newest first.
func (c *Client) ListVersions(ctx context.Context, namespace, name string) ([]*wire.Resource, error) {
	var out struct {
		Versions []*wire.Resource `json:"versions"`
	}
	if err := c.c.Do(ctx, http.MethodGet, c.environmentURL(namespace, name, "/versions", nil), nil, &out); err != nil {
		return nil, err
	}
	return out.Versions, nil
}

// StartDeployment deploys version (a uuid or a number; "" the latest).
// The deployment starts pending.
func (c *Client) StartDeployment(ctx context.Context, namespace, name, version string) (*wire.Resource, error) {
	var out deploymentResponse
	if err := c.c.Do(ctx, http.MethodPost, c.environmentURL(namespace, name, "/deployments", nil), versionRequest{version}, &out); err != nil {
		return nil, err
	}
	return out.Deployment, nil
}

// ListDeployments lists an environment's deployments, latest first.
func (c *Client) ListDeployments(ctx context.Context, namespace, name string) ([]*wire.Resource, error) {
	var out struct {
		Deployments []*wire.Resource `json:"deployments"`
	}
	if err := c.c.Do(ctx, http.MethodGet, c.environmentURL(namespace, name, "/deployments", nil), nil, &out); err != nil {
		return nil, err
	}
	return out.Deployments, nil
}

// GetDeployment returns one deployment of an environment.
func (c *Client) GetDeployment(ctx context.Context, namespace, name, id string) (*wire.Resource, error) {
	var out deploymentResponse
	if err := c.c.Do(ctx, http.MethodGet, c.environmentURL(namespace, name, "/deployments/"+url.PathEscape(id), nil), nil, &out); err != nil {
		return nil, err
	}
	return out.Deployment, nil
}

// StopDeployment halts an in-progress deployment; the tasks it started are
// left, and the environment becomes inactive.
func (c *Client) StopDeployment(ctx context.Context, namespace, name, id string) (*wire.Resource, error) {
	var out deploymentResponse
	if err := c.c.Do(ctx, http.MethodPost, c.environmentURL(namespace, name, "/deployments/"+url.PathEscape(id)+"/stop", nil), nil, &out); err != nil {
		return nil, err
	}
	return out.Deployment, nil
}

// Rollback deploys version, or ("") the version before the one deployed.
func (c *Client) Rollback(ctx context.Context, namespace, name, version string) (*wire.Resource, error) {
	var out deploymentResponse
	if err := c.c.Do(ctx, http.MethodPost, c.environmentURL(namespace, name, "/rollback", nil), versionRequest{version}, &out); err != nil {
		return nil, err
	}
	return out.Deployment, nil
}

// getRaw returns a 200 response's body as it is.
func (c *Client) getRaw(ctx context.Context, url string) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.c.Do(ctx, http.MethodGet, url, nil, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}
