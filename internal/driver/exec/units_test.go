package exec

import (
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/driver"
)

func TestParseProcStat(t *testing.T) {
	// Field 22 is the start time; the name may hold spaces and parentheses.
	tail := " 1 1 0 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10"
	cases := []struct {
		in      string
		want    procStat
		wantErr string
	}{
		{"42 (sleep) S" + tail, procStat{State: 'S', StartTicks: 123456}, ""},
		{"42 (a b) c) (d) Z" + tail, procStat{State: 'Z', StartTicks: 123456}, ""},
		{"42 sleep S" + tail, procStat{}, "no command name"},
		{"42 (sleep) S 1 1", procStat{}, "fields after the name"},
		{"42 (sleep) S" + strings.Replace(tail, "123456", "x", 1), procStat{}, "start time"},
		{"42 (sleep) SS" + tail, procStat{}, "state"},
	}
	for _, tc := range cases {
		got, err := parseProcStat([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseProcStat(%q) = %v, want an error about %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseProcStat(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestBuildEnv(t *testing.T) {
	cases := []struct {
		env       map[string]string
		agentPath string
		want      string
		wantErr   string
	}{
		{nil, "/a:/b", "PATH=/a:/b", ""},
		{nil, "", "PATH=" + defaultPath, ""},
		{map[string]string{"B": "2", "A": "1"}, "/x", "A=1 B=2 PATH=/x", ""},
		{map[string]string{"PATH": "/mine"}, "/x", "PATH=/mine", ""},
		{map[string]string{"PATH": ""}, "/x", "PATH=", ""},
		{map[string]string{"": "v"}, "/x", "", "env: key"},
		{map[string]string{"A=B": "v"}, "/x", "", `"A=B"`},
		{map[string]string{"A": "v\x00"}, "/x", "", "env: A: value holds NUL"},
	}
	for _, tc := range cases {
		got, err := buildEnv(tc.env, tc.agentPath)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("buildEnv(%v) = %v, want error %q", tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("buildEnv(%v, %q) = %q, %v; want %q", tc.env, tc.agentPath, got, err, tc.want)
		}
	}
}

func TestEnvValue(t *testing.T) {
	env := []string{"A=1", "PATH=/bin:/x=y", "B"}
	if got := envValue(env, "PATH"); got != "/bin:/x=y" {
		t.Errorf("PATH = %q", got)
	}
	if got := envValue(env, "C"); got != "" {
		t.Errorf("C = %q", got)
	}
}

func TestCheckSpec(t *testing.T) {
	ok := driver.Spec{Container: "app", Command: []string{"x"}, LogDir: "/l", TaskDir: "/t"}
	if err := checkSpec(ok); err != nil {
		t.Fatalf("checkSpec(ok) = %v", err)
	}
	cases := []struct {
		edit func(*driver.Spec)
		want string
	}{
		{func(s *driver.Spec) { s.Container = "" }, "container: empty"},
		{func(s *driver.Spec) { s.Container = ".." }, "container:"},
		{func(s *driver.Spec) { s.Container = "a\x00" }, "container:"},
		{func(s *driver.Spec) { s.Command = []string{""} }, "command: empty"},
		{func(s *driver.Spec) { s.LogDir = "logs" }, "log_dir:"},
		{func(s *driver.Spec) { s.TaskDir = "" }, "working_dir: empty"},
		{func(s *driver.Spec) { s.TaskDir = "t" }, "working_dir:"},
		{func(s *driver.Spec) { s.WorkingDir = "w" }, "working_dir:"},
		{func(s *driver.Spec) { s.CPUMillis = -1 }, "cpu:"},
		{func(s *driver.Spec) { s.MemoryBytes = -1 }, "memory:"},
	}
	for _, tc := range cases {
		s := ok
		tc.edit(&s)
		if err := checkSpec(s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkSpec(%+v) = %v, want %q", s, err, tc.want)
		}
	}
}

func TestCgroupValues(t *testing.T) {
	cpu := map[int64]string{0: "max 100000", 1000: "100000 100000", 250: "25000 100000", 2500: "250000 100000", 1: "1000 100000"}
	for millis, want := range cpu {
		if got := cpuMaxValue(millis); got != want {
			t.Errorf("cpuMaxValue(%d) = %q, want %q", millis, got, want)
		}
	}
	mem := map[int64]string{0: "max", 1 << 20: "1048576"}
	for b, want := range mem {
		if got := memoryMaxValue(b); got != want {
			t.Errorf("memoryMaxValue(%d) = %q, want %q", b, got, want)
		}
	}
	events := "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n"
	if got := parseOOMKills(events); got != 2 {
		t.Errorf("parseOOMKills = %d, want 2", got)
	}
	if got := parseOOMKills("oom 1\n"); got != 0 {
		t.Errorf("parseOOMKills without oom_kill = %d", got)
	}
	if got := missingControllers("cpuset cpu io memory pids\n", limitControllers); len(got) != 0 {
		t.Errorf("missing = %v", got)
	}
	if got := missingControllers("hugetlb", limitControllers); strings.Join(got, ",") != "cpu,memory" {
		t.Errorf("missing = %v", got)
	}
}

func TestCgroupName(t *testing.T) {
	cases := []struct{ uid, id, container, want string }{
		{"01HX", "default/web", "app", "01HX.app.ab12"},
		{"", "default/web", "app", "default_web.app.ab12"},
		{"", "", "app", "task.app.ab12"},
		{"..", "", "app", "t...app.ab12"},
		{"cgroup.procs", "", "x", "tcgroup.procs.x.ab12"},
		{"ü nicode", "", "app", "__nicode.app.ab12"},
	}
	for _, tc := range cases {
		if got := cgroupName(tc.uid, tc.id, tc.container, "ab12"); got != tc.want {
			t.Errorf("cgroupName(%q, %q, %q) = %q, want %q", tc.uid, tc.id, tc.container, got, tc.want)
		}
	}
}

func TestCgroupPaths(t *testing.T) {
	for _, p := range []string{"trellis", "a/b", "a/../b"} {
		if err := checkCgroupParent(p); err != nil {
			t.Errorf("checkCgroupParent(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"/abs", "..", ".", "../x", "a/../.."} {
		if err := checkCgroupParent(p); err == nil {
			t.Errorf("checkCgroupParent(%q) accepted", p)
		}
	}
	in := map[string]bool{
		"/sys/fs/cgroup/trellis/x":     true,
		"/sys/fs/cgroup/trellis/x/y":   true,
		"/sys/fs/cgroup/trellis":       false,
		"/sys/fs/cgroup/trellis/../x":  false,
		"/sys/fs/cgroup/other":         false,
		"/sys/fs/cgroup/trellisx/a":    false,
		"relative/sys/fs/cgroup/trell": false,
	}
	for p, want := range in {
		if got := within("/sys/fs/cgroup/trellis", p); got != want {
			t.Errorf("within(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestDescribe(t *testing.T) {
	cases := []struct {
		cg   cgroups
		want string
	}{
		{cgroups{note: "no v2"}, "cgroup limits not enforced: no v2"},
		{cgroups{parent: "/p", note: "no controllers"}, "each container in its own cgroup under /p; cgroup limits not enforced: no controllers"},
		{cgroups{parent: "/p", memory: true, note: "cpu: busy"}, "cgroup v2 memory limits enforced under /p; not enforced: cpu: busy"},
		{cgroups{parent: "/p", cpu: true, memory: true}, "cgroup v2 cpu, memory limits enforced under /p"},
	}
	for _, tc := range cases {
		if got := tc.cg.describe(); got != tc.want {
			t.Errorf("describe(%+v) = %q, want %q", tc.cg, got, tc.want)
		}
	}
}

func TestHandleRoundTrip(t *testing.T) {
	st := handleState{StartTicks: 99, Cgroup: "/c", Stdout: "/l/a.stdout", Stderr: "/l/a.stderr", Dir: "/t", Env: []string{"A=1"}}
	at := time.Unix(1700000000, 0)
	h, err := encodeHandle(1234, at, st)
	if err != nil {
		t.Fatal(err)
	}
	if h.Driver != Name || h.ID != "1234" || !h.StartedAt.Equal(at) {
		t.Errorf("handle = %+v", h)
	}
	pid, got, err := decodeHandle(h)
	if err != nil || pid != 1234 || got.StartTicks != 99 || got.Cgroup != "/c" || got.Env[0] != "A=1" {
		t.Errorf("decodeHandle = %d, %+v, %v", pid, got, err)
	}
	bad := []struct {
		h    driver.Handle
		want string
	}{
		{driver.Handle{Driver: "docker", ID: "1", State: h.State}, "handle driver"},
		{driver.Handle{Driver: Name, ID: "-3", State: h.State}, "handle id"},
		{driver.Handle{Driver: Name, ID: "0", State: h.State}, "handle id"},
		{driver.Handle{Driver: Name, ID: "1"}, "handle state: empty"},
		{driver.Handle{Driver: Name, ID: "1", State: []byte(`{"start_ticks":1,"extra":2}`)}, "handle state"},
		{driver.Handle{Driver: Name, ID: "1", State: []byte(`{"stdout":"x"}`)}, "start_ticks is missing"},
	}
	for _, tc := range bad {
		if _, _, err := decodeHandle(tc.h); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeHandle(%+v) = %v, want %q", tc.h, err, tc.want)
		}
	}
}

func TestCatchUp(t *testing.T) {
	cases := []struct {
		since     uint64
		keep      int
		n         int
		continues bool
	}{
		{since: 1, keep: 2, n: 1, continues: true},
		{since: 2, keep: 2, n: 2, continues: true},  // the one read from is now the oldest kept
		{since: 3, keep: 2, n: 2, continues: false}, // it has been dropped
		{since: 1, keep: 0, n: 0, continues: false},
	}
	for _, tc := range cases {
		n, cont := catchUp(tc.since, tc.keep)
		if n != tc.n || cont != tc.continues {
			t.Errorf("catchUp(%d, %d) = %d, %v; want %d, %v", tc.since, tc.keep, n, cont, tc.n, tc.continues)
		}
	}
}
