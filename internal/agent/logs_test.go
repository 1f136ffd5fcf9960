package agent

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// `trellis task logs` through the servers: the agent is attached to one
// server of three, the reader asks another, which forwards the read over
// the server-to-server port to the one that holds the agent's link.
func TestLogsThroughTheServers(t *testing.T) {
	servers, leader := startRaftCluster(t, 3)
	// The agent's server is a follower, and the reader asks the other
	// follower: two hops from the reader to the agent, and the leader
	// plays no part.
	var followers []*testServer
	for i, s := range servers {
		if i != leader {
			followers = append(followers, s)
		}
	}
	on, asked := followers[0], followers[1]
	a := startAgent(t, config(t, "i-1", newProcTable(t), on))
	registered(t, on, a)
	on.registerDefinition(t, "default", shDefinition("talker", `echo hello; echo oops >&2; exec sleep 1000`))
	on.place(t, "default", "t1", "talker:1", "i-1")
	on.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	if a.Server() != on.addr() {
		t.Fatalf("the agent is on %s, want %s", a.Server(), on.addr())
	}

	c, err := client.New("http://" + asked.srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	read := func(q string) (int, string) {
		resp, err := http.Get(c.Addr() + "/v1/tasks/t1/logs/app" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, "stdout through the servers", func() bool { code, body := read("?namespace=default"); return code == 200 && body == "hello\n" })
	eventually(t, "stderr through the servers", func() bool { code, body := read("?stream=stderr"); return code == 200 && body == "oops\n" })
	for _, bad := range []struct {
		path string
		code int
	}{
		{"/v1/tasks/t1/logs/db", http.StatusNotFound},
		{"/v1/tasks/nope/logs/app", http.StatusNotFound},
		{"/v1/tasks/t1/logs/app?stream=stdin", http.StatusBadRequest},
		{"/v1/tasks/t1/logs/app?namespce=default", http.StatusBadRequest},
		{"/v1/tasks/t1/logs/app?namespace=other", http.StatusNotFound},
	} {
		resp, err := http.Get(c.Addr() + bad.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != bad.code {
			t.Errorf("GET %s: %d %s, want %d", bad.path, resp.StatusCode, b, bad.code)
		}
	}

	// An outsider on the agent's server cannot take the agent's link: it
	// names the instance, but not the session its agent registered.
	conn, err := grpc.NewClient(on.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := pbagent.NewLogServiceClient(conn).Attach(metadata.AppendToOutgoingContext(context.Background(),
		resource.AgentInstanceMetadataKey, "i-1", resource.AgentSessionMetadataKey, "forged"))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&pbagent.AttachRequest{Instance: "i-1"})
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an outsider's Attach as i-1: %v, want PERMISSION_DENIED", err)
	}
	if code, body := read(""); code != 200 || body != "hello\n" {
		t.Errorf("after the outsider's Attach: %d %q", code, body)
	}

	// Following: the output keeps coming, and the read ends on the agent
	// when the reader goes away. The reads above end on the agent a moment
	// after their callers have their bodies, so wait for them first.
	eventually(t, "the earlier reads end on the agent", func() bool { return a.LogReads() == 0 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := c.Open(ctx, c.URL("/v1/tasks/t1/logs/app", map[string][]string{"follow": {"1"}}))
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(rc).ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("following: %q %v", line, err)
	}
	if a.LogReads() != 1 {
		t.Errorf("%d reads open on the agent while following, want 1", a.LogReads())
	}
	cancel()
	rc.Close()
	eventually(t, "the agent's read ends with the reader", func() bool { return a.LogReads() == 0 })
}
