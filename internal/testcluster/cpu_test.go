package testcluster

import (
	"os"
	"testing"
	"time"
)

// TestCPUTimeGrows: this process's CPU time is read, and grows with work.
func TestCPUTimeGrows(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for after := before; after <= before; {
		for range 1_000_000 {
			_ = time.Now()
		}
		if after, err = CPUTime(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CPUTime(-1); err == nil {
		t.Fatal("read the CPU time of pid -1")
	}
}
