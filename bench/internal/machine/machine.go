// Package machine reads what the benchmarks say of the machine beside
// their figures: how busy its CPUs were, all processes counted, so that a
// figure measured while something else ran can be told apart.
package machine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/stat's CPU times: USER_HZ, which the Linux
// ABI fixes at 100 on every architecture Go runs on.
const userHZ = 100

// BusyTime is the CPU time the machine has spent busy since it booted,
// summed over every CPU (/proc/stat). The difference of two readings,
// divided by the time between them, is how many cores were busy.
func BusyTime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	ticks, err := busyTicks(line)
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: %w", err)
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// busyTicks sums the busy times of /proc/stat's first line, "cpu" and
// user, nice, system, idle, iowait, irq, softirq, steal, guest,
// guest_nice: all but idle and iowait, and not guest and guest_nice,
// which user and nice already hold.
func busyTicks(line string) (int64, error) {
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, errors.New("no cpu line")
	}
	var busy int64
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, nil
}
