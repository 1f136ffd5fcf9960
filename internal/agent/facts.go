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

	"golang.org/x/sys/unix"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/session"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// What the agent finds out about its host, for the Instance it registers
// (session.Facts).

// probeFacts looks at the host and fingerprints the drivers.
func probeFacts(ctx context.Context, drivers map[string]driver.Driver) session.Facts {
	f := session.Facts{CPUs: runtime.NumCPU()}
	f.Hostname, _ = os.Hostname()
	if file, err := os.Open("/proc/meminfo"); err == nil {
		f.MemoryBytes = parseMemTotal(file)
		file.Close()
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		f.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	names := make([]string, 0, len(drivers))
	for name := range drivers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fp := drivers[name].Fingerprint(ctx)
		f.Drivers = append(f.Drivers, &pborch.DriverInfo{Name: name, Available: fp.Available, Detail: fp.Detail[:min(len(fp.Detail), orchestrator.MaxAttributeValueLength)]})
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
