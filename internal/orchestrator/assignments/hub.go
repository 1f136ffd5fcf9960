package assignments

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/fanout"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// Hub streams each instance's tasks to its subscribers: a fan-out of one
// watch of every Task, keyed by data.instance, that keeps the agents' own
// reports from them.
type Hub struct {
	api     resource.API
	fan     *fanout.Fanout[string]
	metrics *metrics

	definitions definitionCache
}

// NewHub returns a hub reading tasks through api (an in-process resource
// service), its metrics registered with reg (none when nil). Start runs
// it.
func NewHub(api resource.API, reg prometheus.Registerer, log *slog.Logger) (*Hub, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	h := &Hub{api: api, metrics: m}
	h.fan = fanout.New(fanout.Config[string]{
		Watcher:  api,
		Request:  &pbresource.WatchListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}},
		Key:      h.instanceOf,
		Suppress: h.isAgentReport,
		Logger:   log,
	})
	return h, nil
}

// SetClusterIndex tells the hub how to learn the cluster's commit index
// (a Raft server's); without it, an index the hub's view does not reach in
// time is taken as this server's lag.
func (h *Hub) SetClusterIndex(f fanout.ClusterIndex) { h.fan.SetClusterIndex(f) }

// Start watches the tasks until ctx ends, starting over (a fresh listing)
// whenever the watch fails.
func (h *Hub) Start(ctx context.Context) error { return h.fan.Start(ctx) }

// Subscribe returns the tasks placed on instance now, the index they are
// as of, and a subscription to every later change but the agent's own
// reports; see fanout.Fanout.Subscribe for minIndex and the errors.
func (h *Hub) Subscribe(ctx context.Context, instance string, minIndex uint64) ([]*pbresource.Resource, uint64, *fanout.Subscription[string], error) {
	return h.fan.Subscribe(ctx, instance, minIndex)
}

// instanceOf is the fan-out's key of a task: the instance it is placed
// on; none when it is not placed, or does not decode (no agent is told of
// it).
func (h *Hub) instanceOf(res *pbresource.Resource) (string, bool) {
	return keyOfTask(taskOf(res))
}

// keyOfTask is the instance a task is placed on, if any.
func keyOfTask(task *pborch.Task) (string, bool) {
	inst := task.GetInstance()
	return inst, inst != ""
}

// isAgentReport is the fan-out's Suppress: the agent's own report (a
// write of status["agent"] alone) is not sent back to it, for it has it
// from its write. Echoing each report back would double what every agent
// receives.
func (h *Hub) isAgentReport(prev, next *pbresource.Resource) bool {
	return orchestrator.IsAgentReport(prev, next)
}

// taskOf is a task's data; nil (so no instance, and no agent is told of
// it) when it does not decode.
func taskOf(res *pbresource.Resource) *pborch.Task {
	t, err := resource.DecodeData[*pborch.Task](res)
	if err != nil {
		return nil
	}
	return t
}
