package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

// deploymentType is the daemon scheduler's Deployment resource type
// (docs/scheduler.md).
var deploymentType = &pbresource.Type{Group: "scheduler", GroupVersion: "v1", Kind: "Deployment"}

// envSpec is an environment's spec in the JSON form of docs/scheduler.md's
// spec file.
type envSpec struct {
	Name           string        `json:"name"`
	Type           string        `json:"type"`
	TaskDefinition string        `json:"task_definition"`
	InstanceGroup  instanceGroup `json:"instance_group"`
	Deployment     *deployConfig `json:"deployment,omitempty"`
}

type instanceGroup struct {
	Cluster    string   `json:"cluster"`
	Attributes []string `json:"attributes,omitempty"`
}

type deployConfig struct {
	MinHealthyPercent *int   `json:"min_healthy_percent,omitempty"`
	MinHealthyTime    string `json:"min_healthy_time,omitempty"`
	HealthyDeadline   string `json:"healthy_deadline,omitempty"`
	ProgressDeadline  string `json:"progress_deadline,omitempty"`
}

// schedClient calls the daemon scheduler's HTTP API on one server, as the
// CLI does (`trellis env create`, `trellis deploy`).
type schedClient struct {
	base string
	http *http.Client
}

func newSchedClient(httpAddr string) *schedClient {
	return &schedClient{base: "http://" + httpAddr, http: &http.Client{Timeout: 30 * time.Second}}
}

// call sends body (JSON) and decodes a 2xx answer into out; any other
// answer is an error carrying the server's message.
func (c *schedClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// createEnv is CreateEnvironment; it returns the first version's uuid.
func (c *schedClient) createEnv(ctx context.Context, s envSpec) (string, error) {
	var out struct {
		Version string `json:"version"`
	}
	if err := c.call(ctx, http.MethodPost, "/v1/environments", s, &out); err != nil {
		return "", err
	}
	return out.Version, nil
}

// updateEnv is UpdateEnvironment; it returns the new version's uuid.
func (c *schedClient) updateEnv(ctx context.Context, s envSpec) (string, error) {
	var out struct {
		Version string `json:"version"`
	}
	if err := c.call(ctx, http.MethodPut, "/v1/environments/"+url.PathEscape(s.Name), s, &out); err != nil {
		return "", err
	}
	return out.Version, nil
}

// startDeployment is StartDeployment of version (the latest when empty);
// it returns the deployment's id.
func (c *schedClient) startDeployment(ctx context.Context, env, version string) (string, error) {
	var out struct {
		Deployment wire.Resource `json:"deployment"`
	}
	body := map[string]string{}
	if version != "" {
		body["version"] = version
	}
	if err := c.call(ctx, http.MethodPost, "/v1/environments/"+url.PathEscape(env)+"/deployments", body, &out); err != nil {
		return "", err
	}
	if out.Deployment.ID.Name == "" {
		return "", fmt.Errorf("StartDeployment %s: the answer names no deployment", env)
	}
	return out.Deployment.ID.Name, nil
}

// getDeployment is GetDeployment.
func (c *schedClient) getDeployment(ctx context.Context, env, id string) (*pbscheduler.Deployment, error) {
	var out struct {
		Deployment wire.Resource `json:"deployment"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/environments/"+url.PathEscape(env)+"/deployments/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	var d pbscheduler.Deployment
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out.Deployment.Data, &d); err != nil {
		return nil, fmt.Errorf("deployment %s: %w", id, err)
	}
	return &d, nil
}

// registerSimDef writes family:revision, one exec container; on a
// simulated instance it runs without a process.
func (a *api) registerSimDef(ctx context.Context, family string, revision int64) error {
	data, err := anypb.New(&pborch.TaskDefinition{
		Family:     family,
		Revision:   revision,
		Containers: []*pborch.ContainerDefinition{{Name: "daemon", Driver: "exec", Command: []string{"sleep", "infinity"}}},
	})
	if err != nil {
		return err
	}
	_, err = a.res.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: orchestrator.TaskDefinitionID(namespace, family, revision), Data: data,
	}})
	if err != nil {
		return fmt.Errorf("register %s:%d: %w", family, revision, err)
	}
	return nil
}
