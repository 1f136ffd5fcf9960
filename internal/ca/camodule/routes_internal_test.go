package camodule

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
)

func stored(t *testing.T, name, version string, m proto.Message) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: ca.RootID(name), Version: version, Data: data}
}

// newestVersion is the largest version by number, not by text, and ""
// (an empty range) for no resources.
func TestNewestVersion(t *testing.T) {
	r := func(v string) *pbresource.Resource { return &pbresource.Resource{Version: v} }
	tests := []struct {
		name string
		list []*pbresource.Resource
		want string
	}{
		{name: "none", want: ""},
		{name: "one", list: []*pbresource.Resource{r("7")}, want: "7"},
		{name: "by number", list: []*pbresource.Resource{r("9"), r("10"), r("2")}, want: "10"},
	}
	for _, tt := range tests {
		if got := newestVersion(tt.list); got != tt.want {
			t.Errorf("%s: newestVersion = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// The roots' answer puts the active root first, then the newest; it takes
// the trust domain from the active root, and shows times in UTC.
func TestRootsBody(t *testing.T) {
	at := func(d int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2030+d, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	old := stored(t, "old", "3", &pbca.CARoot{Id: "aa", TrustDomain: "x.trellis", NotAfter: at(0), RotatedOutAt: at(-4), RootCert: "A"})
	older := stored(t, "older", "2", &pbca.CARoot{Id: "bb", TrustDomain: "x.trellis", NotAfter: at(-1)})
	active := stored(t, "new", "4", &pbca.CARoot{Id: "cc", TrustDomain: "x.trellis", NotAfter: at(5), Active: true, IntermediateCerts: []string{"I"}})
	got, err := rootsBody([]*pbresource.Resource{older, old, active})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got.Roots {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "new,old,older" || got.ActiveRootID != "cc" || got.TrustDomain != "x.trellis" {
		t.Errorf("rootsBody = %+v (order %v)", got, names)
	}
	if r := got.Roots[1]; r.RotatedOutAt == nil || !r.RotatedOutAt.Equal(at(-4).AsTime()) || r.RootCert != "A" || r.IntermediateCerts == nil {
		t.Errorf("old root = %+v", r)
	}
	if got.Roots[0].RotatedOutAt != nil || len(got.Roots[0].IntermediateCerts) != 1 {
		t.Errorf("active root = %+v", got.Roots[0])
	}
	empty, err := rootsBody(nil)
	if err != nil || empty.Roots == nil || len(empty.Roots) != 0 {
		t.Errorf("rootsBody(nil) = %+v, %v: want an empty list, not null", empty, err)
	}
}

// The configuration's answer never holds a key, even one that some
// future path stored by mistake.
func TestConfigBodyHoldsNoKey(t *testing.T) {
	c := &pbca.CAConfig{PrivateKey: "-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"}
	ca.FillConfigDefaults(c)
	st, err := anypb.New(&pbca.CAManagerStatus{State: ca.StateFailed, LastError: "boom"})
	if err != nil {
		t.Fatal(err)
	}
	res := stored(t, ca.ConfigName, "5", c)
	res.Status = map[string]*pbresource.Status{ca.ManagerStatusKey: {Data: st}}
	got, err := configBody(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got.Config), "PRIVATE") || strings.Contains(string(got.Config), "private_key\"") {
		t.Errorf("config = %s: holds a key", got.Config)
	}
	// protojson varies its spacing on purpose: compare decoded values.
	var cfg, mgr map[string]any
	if err := json.Unmarshal(got.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.Manager, &mgr); err != nil {
		t.Fatal(err)
	}
	if cfg["provider"] != "builtin" || mgr["last_error"] != "boom" || got.Version != "5" {
		t.Errorf("configBody = %s %s %s", got.Version, got.Config, got.Manager)
	}
}
