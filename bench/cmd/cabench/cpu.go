package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// userHZ is the unit of /proc/stat's CPU times: USER_HZ, which the Linux
// ABI fixes at 100 on every architecture Go runs on.
const userHZ = 100

// selfCPU is the CPU time this process has used so far (0 if unreadable).
func selfCPU() time.Duration {
	d, _ := testcluster.CPUTime(os.Getpid())
	return d
}

// systemTicks reads the machine's busy CPU time from /proc/stat (all but
// idle and iowait), in USER_HZ ticks summed over every CPU.
func systemTicks() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, errors.New("/proc/stat: no cpu line")
	}
	for i, s := range f[1:] {
		// guest and guest_nice (fields 9, 10) are already in user and nice.
		if i >= 8 {
			break
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, nil
}
