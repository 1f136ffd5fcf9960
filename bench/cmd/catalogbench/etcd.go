package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"trellis.dev/trellis/bench/internal/etcdpeer"
)

// etcdCluster is a 3-member etcd cluster with its defaults, and a client
// of each member.
type etcdCluster struct {
	cmds   []*exec.Cmd
	clis   []*clientv3.Client
	leader int // index of the member that leads
}

// startEtcd starts the members in b.dir/name (each dies with this process), waits
// until each is healthy, dials each and finds the leader.
func (b *bench) startEtcd(ctx context.Context, name string) (*etcdCluster, error) {
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	layout, err := etcdpeer.Layout(3)
	if err != nil {
		return nil, err
	}
	ec := &etcdCluster{}
	for i := range layout {
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("etcd%d.log", i)))
		if err != nil {
			ec.stop()
			return nil, err
		}
		cmd := exec.Command(b.etcd, etcdpeer.Args(layout, i, filepath.Join(dir, fmt.Sprintf("etcd%d", i)), "catalogbench")...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			ec.stop()
			return nil, err
		}
		logf.Close()
		ec.cmds = append(ec.cmds, cmd)
	}
	if err := etcdpeer.WaitHealthy(ctx, layout); err != nil {
		ec.stop()
		return nil, fmt.Errorf("etcd did not become healthy: %w (logs in %s)", err, dir)
	}
	for _, m := range layout {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + m.ClientAddr}, DialTimeout: 5 * time.Second})
		if err != nil {
			ec.stop()
			return nil, err
		}
		ec.clis = append(ec.clis, c)
	}
	ec.leader = -1
	for i, m := range layout {
		st, err := ec.clis[0].Status(ctx, "http://"+m.ClientAddr)
		if err != nil {
			ec.stop()
			return nil, err
		}
		if st.Leader == st.Header.GetMemberId() {
			ec.leader = i
		}
	}
	if ec.leader < 0 {
		ec.stop()
		return nil, fmt.Errorf("etcd: no member says it leads")
	}
	return ec, nil
}

func (ec *etcdCluster) follower() int { return (ec.leader + 1) % len(ec.clis) }

func (ec *etcdCluster) stop() {
	for _, c := range ec.clis {
		c.Close()
	}
	for _, cmd := range ec.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func (ec *etcdCluster) pids() []int {
	var out []int
	for _, cmd := range ec.cmds {
		out = append(out, cmd.Process.Pid)
	}
	return out
}

// rss is each member's resident size, in bytes.
func (ec *etcdCluster) rss() ([]int64, error) {
	var out []int64
	for _, cmd := range ec.cmds {
		r, err := rssOf(cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// rssOf reads VmRSS from /proc/PID/status, in bytes.
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads the VmRSS line of a /proc/PID/status, in bytes.
func parseVmRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS line")
}

// etcdWatch is the peer of trellisWatch: b.watchers watches of one key
// spread over the 3 members (one client, so one gRPC stream, per member),
// each change a Put on the leader of the change's number; a watcher has
// the change when it has received the event with that number.
func (b *bench) etcdWatch(ctx context.Context) (*watchResult, error) {
	ec, err := b.startEtcd(ctx, "watch-etcd")
	if err != nil {
		return nil, err
	}
	defer ec.stop()
	const key = "/catalogbench/x"
	if _, err := ec.clis[ec.leader].Put(ctx, key, "-1"); err != nil {
		return nil, err
	}
	cs := &changes{watchers: b.watchers}
	wctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	errs := make(chan error, b.watchers)
	for w := range b.watchers {
		ch := ec.clis[w%len(ec.clis)].Watch(wctx, key, clientv3.WithCreatedNotify())
		first, ok := <-ch
		if !ok || !first.Created {
			return nil, fmt.Errorf("etcd watch %d was not created: %v", w, first.Err())
		}
		go func() {
			var last *change
			for resp := range ch {
				at := time.Now()
				if err := resp.Err(); err != nil {
					errs <- err
					return
				}
				for _, ev := range resp.Events {
					if v, err := strconv.Atoi(string(ev.Kv.Value)); err == nil {
						cs.seen(w, v, at, &last)
					}
				}
			}
		}()
	}
	r := &watchResult{watchers: b.watchers, servers: len(ec.clis)}
	var cpu *cpuMeter
	for k := range b.warmup + b.changes {
		if k == b.warmup {
			cpu = newCPUMeter(ec.pids())
		}
		select {
		case err := <-errs:
			return nil, fmt.Errorf("an etcd watcher failed: %w", err)
		default:
		}
		c := cs.begin(k)
		start := time.Now()
		if _, err := ec.clis[ec.leader].Put(ctx, key, strconv.Itoa(k)); err != nil {
			return nil, err
		}
		ack := time.Now()
		last, err := c.wait(ctx, changeLimit)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", k, err)
		}
		if k >= b.warmup {
			r.record(c, start, ack, last, ec.leader)
		}
		pause(ctx, b.gap)
	}
	r.serverCPU, r.clientCPU = cpu.since()
	return r, nil
}

// etcdKey is the key of instance i of service s.
func etcdKey(s, i int) string { return fmt.Sprintf("/svc/s%d/%06d", s, i) }

// etcdValueSize is the size of each of n values under keys of keyLen
// bytes so that the n keys and values weigh total bytes (at least 1).
func etcdValueSize(total, n, keyLen int) int { return max(total/n-keyLen, 1) }

// etcdRead is the peer of trellisRead: b.instances keys whose key and
// value weigh bodySize/b.perService bytes each, written in transactions of 128 puts,
// then the members' resident sizes after b.settle, then b.reads
// serializable range reads of the b.perService keys of one prefix on a
// follower (read from its own store, as a Trellis follower answers from
// its informer).
func (b *bench) etcdRead(ctx context.Context, bodySize int) (*readResult, error) {
	ec, err := b.startEtcd(ctx, "read-etcd")
	if err != nil {
		return nil, err
	}
	defer ec.stop()
	value := strings.Repeat("v", etcdValueSize(bodySize, b.perService, len(etcdKey(0, 0))))
	cli := ec.clis[ec.leader]
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := cli.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		return err
	}
	for i := range b.instances {
		svc := i / b.perService
		ops = append(ops, clientv3.OpPut(etcdKey(svc, i), value))
		if len(ops) == 128 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := b.settleWait(ctx); err != nil {
		return nil, err
	}
	r := &readResult{}
	if r.rss, err = ec.rss(); err != nil {
		return nil, err
	}
	r.leader = ec.leader
	f := ec.clis[ec.follower()]
	for i := range b.reads + 1 {
		start := time.Now()
		resp, err := f.Get(ctx, "/svc/s0/", clientv3.WithPrefix(), clientv3.WithSerializable())
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) != b.perService {
			return nil, fmt.Errorf("etcd range read: %d keys, want %d", len(resp.Kvs), b.perService)
		}
		if i == 0 {
			continue // the first read dials and warms; not counted
		}
		r.latency = append(r.latency, d)
		size := 0
		for _, kv := range resp.Kvs {
			size += len(kv.Key) + len(kv.Value)
		}
		r.bodySize, r.entries = size, len(resp.Kvs)
	}
	return r, nil
}

// settleWait waits b.settle, or until ctx ends (its error).
func (b *bench) settleWait(ctx context.Context) error {
	settle := time.NewTimer(b.settle)
	defer settle.Stop()
	select {
	case <-settle.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
