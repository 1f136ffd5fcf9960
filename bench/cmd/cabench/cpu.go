package main

import (
	"os"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// selfCPU is the CPU time this process has used so far (0 if unreadable).
func selfCPU() time.Duration {
	d, _ := testcluster.CPUTime(os.Getpid())
	return d
}
