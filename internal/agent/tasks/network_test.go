package tasks

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/tasknet"
)

// What a report and the metadata say of a task's network, at each step.
func TestNetworkStatusAndMetadata(t *testing.T) {
	host := &pborch.TaskDefinition{Family: "h"}
	bridge := &pborch.TaskDefinition{Family: "b", Network: "bridge"}
	att := &tasknet.Attachment{TaskUID: "U", Path: "/data/network/netns/U",
		Address: netip.MustParsePrefix("172.26.64.7/20"), Gateway: netip.MustParseAddr("172.26.64.1"),
		Ports: []tasknet.Port{{Name: "http", ContainerPort: 8080, HostPort: 31000, Protocol: "tcp"}}}

	if st := networkStatus(host, nil); st != nil {
		t.Fatalf("a host task reports a network: %v", st)
	}
	if st := networkStatus(bridge, nil); !proto.Equal(st, &pborch.TaskNetwork{Mode: "bridge"}) {
		t.Fatalf("before setup: %v", st)
	}
	if st := networkStatus(bridge, &taskNetwork{Holder: &driver.Handle{ID: "h"}}); !proto.Equal(st, &pborch.TaskNetwork{Mode: "bridge"}) {
		t.Fatalf("while being set up: %v", st)
	}
	want := &pborch.TaskNetwork{Mode: "bridge", NamespacePath: "/data/network/netns/U", Address: "172.26.64.7",
		Ports: []*pborch.PortBinding{{Name: "http", ContainerPort: 8080, HostPort: 31000, Protocol: "tcp"}}}
	if st := networkStatus(bridge, &taskNetwork{Attachment: att}); !proto.Equal(st, want) {
		t.Fatalf("set up: %v, want %v", st, want)
	}

	if md := networkMetadata(host, nil); md.Mode != "host" || md.NamespacePath != "" {
		t.Fatalf("host metadata %+v", md)
	}
	md := networkMetadata(bridge, &taskNetwork{Attachment: att})
	if md.Mode != "bridge" || md.NamespacePath != att.Path || md.Address != "172.26.64.7/20" || md.Gateway != "172.26.64.1" || len(md.Ports) != 1 || md.Ports[0].HostPort != 31000 {
		t.Fatalf("bridge metadata %+v", md)
	}

	// Containers join the namespace while it is set up, never after.
	up := &taskNetwork{Holder: &driver.Handle{Driver: "docker", ID: "holder"}, Attachment: att}
	if netnsOf(up) != att.Path || holderOf(up) != "holder" {
		t.Fatalf("set up: netns %q holder %q", netnsOf(up), holderOf(up))
	}
	down := *up
	down.Released = true
	if netnsOf(&down) != "" || holderOf(&down) != "" || netnsOf(nil) != "" {
		t.Fatal("a released network is still handed to containers")
	}
	// Once released, the address and ports stay in the report, the
	// namespace that no longer exists does not.
	if st := networkStatus(bridge, &down); st.GetNamespacePath() != "" || st.GetAddress() != "172.26.64.7" || len(st.GetPorts()) != 1 {
		t.Fatalf("released: %v", st)
	}
	if md := networkMetadata(bridge, &down); md.NamespacePath != "" || md.Address == "" {
		t.Fatalf("released metadata %+v", md)
	}
}

func TestRequestedPorts(t *testing.T) {
	def := &pborch.TaskDefinition{Ports: []*pborch.PortMapping{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, HostPort: 5353, Protocol: "udp"}}}
	got := requestedPorts(def)
	if len(got) != 2 || got[0] != (tasknet.Port{Name: "http", ContainerPort: 8080}) || got[1] != (tasknet.Port{Name: "dns", ContainerPort: 53, HostPort: 5353, Protocol: "udp"}) {
		t.Fatalf("%+v", got)
	}
}
