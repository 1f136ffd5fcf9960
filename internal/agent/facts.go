package agent

import (
	"bufio"
	"context"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"golang.org/x/sys/unix"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// Built-in attribute keys: the agent sets these at every registration, and
// they are the only keys it ever removes (driver.* for drivers no longer
// available). Every other attribute belongs to the operator.
const (
	AttrOS          = "os"
	AttrArch        = "arch"
	AttrHostname    = "hostname"
	AttrCPUCount    = "cpu.count"
	AttrMemoryBytes = "memory.bytes"
	AttrKernel      = "kernel"
	// AttrDriverPrefix + name is set for each available driver, to its
	// detail (a version).
	AttrDriverPrefix = "driver."
)

// BuiltinAttribute reports whether an attribute is one the agent sets
// itself from what it finds on its host (operators cannot set or remove
// those).
func BuiltinAttribute(k string) bool {
	switch k {
	case AttrOS, AttrArch, AttrHostname, AttrCPUCount, AttrMemoryBytes, AttrKernel:
		return true
	}
	return strings.HasPrefix(k, AttrDriverPrefix)
}

// facts are what the agent found out about its host.
type facts struct {
	hostname    string
	cpus        int
	memoryBytes int64
	kernel      string
	drivers     []*pborch.DriverInfo
}

// probeFacts looks at the host and fingerprints the drivers.
func probeFacts(ctx context.Context, drivers map[string]driver.Driver) facts {
	f := facts{cpus: runtime.NumCPU()}
	f.hostname, _ = os.Hostname()
	if file, err := os.Open("/proc/meminfo"); err == nil {
		f.memoryBytes = parseMemTotal(file)
		file.Close()
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		f.kernel = unix.ByteSliceToString(u.Release[:])
	}
	names := make([]string, 0, len(drivers))
	for name := range drivers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fp := drivers[name].Fingerprint(ctx)
		f.drivers = append(f.drivers, &pborch.DriverInfo{Name: name, Available: fp.Available, Detail: truncate(fp.Detail, orchestrator.MaxAttributeValueLength)})
	}
	return f
}

// parseMemTotal reads MemTotal from /proc/meminfo text ("MemTotal:
// 16333364 kB"), in bytes; 0 when it is not there.
func parseMemTotal(r io.Reader) int64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "MemTotal:" {
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		if len(fields) >= 3 && strings.EqualFold(fields[2], "kB") {
			n *= 1024
		}
		return n
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// attributes are the built-in attributes of f.
func (f facts) attributes() map[string]string {
	a := map[string]string{
		AttrOS:       runtime.GOOS,
		AttrArch:     runtime.GOARCH,
		AttrCPUCount: strconv.Itoa(f.cpus),
	}
	if f.hostname != "" {
		a[AttrHostname] = truncate(f.hostname, orchestrator.MaxAttributeValueLength)
	}
	if f.memoryBytes > 0 {
		a[AttrMemoryBytes] = strconv.FormatInt(f.memoryBytes, 10)
	}
	if f.kernel != "" {
		a[AttrKernel] = f.kernel
	}
	for _, d := range f.drivers {
		if d.Available && orchestrator.ValidateAttributeKey("", AttrDriverPrefix+d.Name) == nil {
			a[AttrDriverPrefix+d.Name] = d.Detail
		}
	}
	return a
}

// registration is what the agent writes into its Instance.
type registration struct {
	cluster    string
	address    string
	session    string
	version    string
	facts      facts
	attributes map[string]string // the operator's, from the flags
}

// mergeInstance is the Instance the agent registers, given what is stored
// (nil when none is): the built-in attributes and those of the flags over
// the stored ones, built-in keys the host no longer has removed, and the
// drain flag (and every other attribute) kept as the operator left them.
func mergeInstance(stored *pborch.Instance, r registration, registeredAt time.Time) *pborch.Instance {
	in := &pborch.Instance{
		RegisteredAt: timestamppb.New(registeredAt),
		DownSince:    stored.GetDownSince(), // the servers' to say
	}
	attrs := make(map[string]string)
	for k, v := range stored.GetAttributes() {
		if !BuiltinAttribute(k) {
			attrs[k] = v
		}
	}
	for k, v := range r.attributes {
		attrs[k] = v
	}
	for k, v := range r.facts.attributes() {
		attrs[k] = v
	}
	in.Cluster = r.cluster
	in.Address = r.address
	in.Attributes = attrs
	in.Drain = stored.GetDrain()
	in.Status = orchestrator.InstanceStatus(false, false, in.Drain)
	in.Session = r.session
	in.AgentVersion = r.version
	in.Resources = &pborch.Resources{CpuMillis: int64(r.facts.cpus) * 1000, MemoryBytes: r.facts.memoryBytes}
	in.Drivers = r.facts.drivers
	return in
}
