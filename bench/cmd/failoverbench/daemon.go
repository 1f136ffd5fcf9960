package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"trellis.dev/trellis/bench/internal/report"

	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	schedclient "trellis.dev/trellis/internal/scheduler/client"
	"trellis.dev/trellis/internal/testcluster"
)

// The daemon cell's two environments, one per zone of the fleet.
var daemonEnvs = []struct{ name, zone string }{{"failover-a", "zone-1"}, {"failover-b", "zone-2"}}

// simStartDelay is how long a simulated task takes to start, so that a
// deployment lasts long enough to be interrupted (as in test/).
const simStartDelay = 300 * time.Millisecond

// daemonRun is one rolling deployment of both environments.
type daemonRun struct {
	killed string // the leader killed mid-way, "" for none
	// took is the deployments' start → both completed and both
	// environments whole; afterKill the kill → the same.
	took, afterKill time.Duration
}

type daemonResult struct {
	runs []daemonRun
}

// daemonCell runs the daemon cell: rolling deployments of two
// environments, alternately without and with a leader kill once each has
// completed a batch.
func (b *bench) daemonCell(ctx context.Context) (*daemonResult, error) {
	dir := b.cellDir("daemon")
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: b.trellis, Dir: dir, Servers: 3, Extra: b.serverFlags})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	var grpcAddrs []string
	for _, m := range c.Members {
		grpcAddrs = append(grpcAddrs, m.GRPCAddr)
	}
	sim, err := testcluster.StartSim(testcluster.SimOptions{
		Bin: b.trellis, Dir: dir, Label: "fleet", Prefix: "sim-", Instances: b.instances,
		Servers: grpcAddrs, Zones: len(daemonEnvs),
		Extra: []string{"-start-delay", simStartDelay.String(), "-log-level", "warn"},
	})
	if err != nil {
		return nil, err
	}
	defer sim.Kill()
	d := &daemonDriver{b: b, c: c, hc: &http.Client{Timeout: 10 * time.Second}}
	for _, e := range daemonEnvs {
		for rev := 1; rev <= 2; rev++ {
			if err := d.registerTaskDef(ctx, dir, e.name, rev); err != nil {
				return nil, err
			}
		}
	}
	if err := d.waitReady(ctx, b.instances); err != nil {
		return nil, fmt.Errorf("%w (fleet log: %s)", err, sim.LogPath)
	}
	mhp := int32(50)
	for _, e := range daemonEnvs {
		spec := schedclient.EnvironmentSpec{Name: e.name, Type: "daemon", TaskDefinition: e.name + ":1",
			InstanceGroup: &schedclient.InstanceGroupSpec{Cluster: "default", Attributes: []string{"zone=" + e.zone}},
			Deployment:    &schedclient.DeploymentSettings{MinHealthyPercent: &mhp, MinHealthyTime: b.minHealthy.String()}}
		if err := d.do(ctx, func(cl *client.Client) error {
			_, err := schedclient.New(cl).CreateEnvironment(ctx, "", &spec)
			return err
		}); err != nil {
			return nil, fmt.Errorf("create environment %s: %w", e.name, err)
		}
	}
	fmt.Fprintf(b.progress, "failoverbench: daemon: %d instances ready; first deployment\n", b.instances)
	if _, err := d.deployBoth(ctx, false); err != nil {
		return nil, err
	}
	r := &daemonResult{}
	rev := 1
	for i := range 2 * b.deploys {
		rev = 3 - rev
		for _, e := range daemonEnvs {
			spec := schedclient.EnvironmentSpec{TaskDefinition: fmt.Sprintf("%s:%d", e.name, rev)}
			if err := d.do(ctx, func(cl *client.Client) error {
				_, err := schedclient.New(cl).UpdateEnvironment(ctx, "", e.name, &spec)
				return err
			}); err != nil {
				return nil, fmt.Errorf("update environment %s: %w", e.name, err)
			}
		}
		run, err := d.deployBoth(ctx, i%2 == 1)
		if err != nil {
			return nil, err
		}
		r.runs = append(r.runs, run)
		if run.killed != "" {
			fmt.Fprintf(b.progress, "failoverbench: daemon: deployment %d, leader %s killed: both whole %s after the kill (%s in all)\n", i+1, run.killed, report.Round(run.afterKill), report.Round(run.took))
		} else {
			fmt.Fprintf(b.progress, "failoverbench: daemon: deployment %d, no kill: both whole after %s\n", i+1, report.Round(run.took))
		}
	}
	return r, nil
}

// daemonDriver talks to the cluster through whichever server answers.
type daemonDriver struct {
	b  *bench
	c  *testcluster.Cluster
	hc *http.Client
}

// do calls f with a client of a running server, and again with the next
// while the answer is a server error or no answer (no leader yet, the
// server died) or a conflict, for up to a minute.
func (d *daemonDriver) do(ctx context.Context, f func(*client.Client) error) error {
	deadline := time.Now().Add(time.Minute)
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if time.Now().After(deadline) {
				return last
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		var running []*testcluster.Member
		for _, m := range d.c.Members {
			if m.Running() {
				running = append(running, m)
			}
		}
		if len(running) == 0 {
			last = errors.New("no server runs")
			continue
		}
		cl, err := client.New(running[attempt%len(running)].HTTPAddr, client.WithHTTPClient(d.hc))
		if err != nil {
			return err
		}
		err = f(cl)
		if err == nil {
			return nil
		}
		last = err
		var ae *client.APIError
		if errors.As(err, &ae) && ae.StatusCode < 500 && ae.Code != wire.CodeConflict {
			return err
		}
	}
}

// registerTaskDef registers family:rev (one exec container, which the
// simulated driver runs without a process) with the CLI.
func (d *daemonDriver) registerTaskDef(ctx context.Context, dir, family string, rev int) error {
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", family, rev))
	def := fmt.Sprintf("family: %s\ncontainers:\n  - name: main\n    driver: exec\n    command: [\"/bin/sleep\", \"%d\"]\n", family, 3600+rev)
	if err := os.WriteFile(path, []byte(def), 0o644); err != nil {
		return err
	}
	return d.do(ctx, func(cl *client.Client) error {
		addr := strings.TrimPrefix(cl.Addr(), "http://")
		cmd := exec.CommandContext(ctx, d.b.trellis, "taskdef", "register", "-f", path)
		cmd.Env = append(os.Environ(), "TRELLIS_ADDR="+addr)
		out, err := cmd.CombinedOutput()
		if want := fmt.Sprintf("registered %s:%d", family, rev); err != nil || !strings.Contains(string(out), want) {
			return fmt.Errorf("taskdef register %s: %v: %s", path, err, out)
		}
		return nil
	})
}

// waitReady waits until n instances are ready.
func (d *daemonDriver) waitReady(ctx context.Context, n int) error {
	var ready int
	err := testcluster.WaitFor(ctx, 5*time.Minute, func() bool {
		ready = 0
		_ = d.do(ctx, func(cl *client.Client) error {
			ins, err := cl.List(ctx, wire.Type{Group: "orchestrator", GroupVersion: "v1", Kind: "Instance"}, client.ListOptions{})
			if err != nil {
				return err
			}
			for _, in := range ins {
				var data struct {
					Status string `json:"status"`
				}
				if json.Unmarshal(in.Data, &data) == nil && data.Status == "ready" {
					ready++
				}
			}
			return nil
		})
		return ready >= n
	})
	if err != nil {
		return fmt.Errorf("%d of %d instances ready: %w", ready, n, err)
	}
	return nil
}

type deploymentData struct {
	Status       string `json:"status"`
	StatusReason string `json:"status_reason"`
	Total        int    `json:"total"`
	Complete     int    `json:"complete"`
}

// deployBoth starts a deployment of each environment's latest version
// and waits until both completed and both environments are whole. With
// kill, the leader is killed once both have completed a batch, and
// restarted once they are whole.
func (d *daemonDriver) deployBoth(ctx context.Context, kill bool) (daemonRun, error) {
	var run daemonRun
	ids := map[string]string{}
	start := time.Now()
	for _, e := range daemonEnvs {
		if err := d.do(ctx, func(cl *client.Client) error {
			dep, err := schedclient.New(cl).StartDeployment(ctx, "", e.name, "")
			if err == nil {
				ids[e.name] = dep.ID.Name
			}
			return err
		}); err != nil {
			return run, fmt.Errorf("deploy %s: %w", e.name, err)
		}
	}
	var killedAt time.Time
	var killed *testcluster.Member
	if kill {
		if err := testcluster.WaitFor(ctx, 5*time.Minute, func() bool {
			for _, e := range daemonEnvs {
				dd, err := d.deployment(ctx, e.name, ids[e.name])
				if err != nil || dd.Status != "in-progress" || dd.Complete == 0 || dd.Complete >= dd.Total {
					return false
				}
			}
			return true
		}); err != nil {
			return run, fmt.Errorf("the deployments never both had a batch done and more to do: %w", err)
		}
		leader, err := d.c.WaitLeader(ctx, d.c.Members)
		if err != nil {
			return run, err
		}
		leader.Kill()
		killedAt, killed, run.killed = time.Now(), leader, leader.Name
	}
	want := d.b.instances / len(daemonEnvs)
	var last string
	err := pollEvery(ctx, 5*time.Minute, 20*time.Millisecond, func() bool {
		for _, e := range daemonEnvs {
			dd, err := d.deployment(ctx, e.name, ids[e.name])
			if err != nil {
				last = err.Error()
				return false
			}
			if dd.Status != "completed" {
				last = fmt.Sprintf("%s: deployment %s %s (%d of %d) %s", e.name, ids[e.name], dd.Status, dd.Complete, dd.Total, dd.StatusReason)
				if dd.Status != "in-progress" && dd.Status != "pending" {
					return true // ended otherwise: reported below
				}
				return false
			}
			var whole bool
			_ = d.do(ctx, func(cl *client.Client) error {
				st, err := schedclient.New(cl).EnvironmentStatus(ctx, "", e.name)
				if err != nil {
					return err
				}
				whole = int(st.GetDesired()) == want && int(st.GetActive()) == want
				last = fmt.Sprintf("%s: %s", e.name, st.GetSummary())
				return nil
			})
			if !whole {
				return false
			}
		}
		return true
	})
	done := time.Now()
	if err != nil {
		return run, fmt.Errorf("the environments were not whole: %s: %w", last, err)
	}
	for _, e := range daemonEnvs {
		if dd, err := d.deployment(ctx, e.name, ids[e.name]); err != nil || dd.Status != "completed" {
			return run, fmt.Errorf("%s: deployment %s ended %s (%s)", e.name, ids[e.name], dd.Status, dd.StatusReason)
		}
	}
	run.took = done.Sub(start)
	if killed != nil {
		run.afterKill = done.Sub(killedAt)
		if err := killed.Start(); err != nil {
			return run, err
		}
		if _, err := d.c.WaitLeader(ctx, d.c.Members); err != nil {
			return run, err
		}
	}
	return run, nil
}

// deployment reads one deployment of env.
func (d *daemonDriver) deployment(ctx context.Context, env, id string) (deploymentData, error) {
	var out deploymentData
	err := d.do(ctx, func(cl *client.Client) error {
		res, err := schedclient.New(cl).GetDeployment(ctx, "", env, id)
		if err != nil {
			return err
		}
		return json.Unmarshal(res.Data, &out)
	})
	return out, err
}
