package exec

import (
	"errors"
	"io/fs"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcGone: a process whose /proc entry is missing, or that is being
// reaped (ESRCH), is gone; other errors are not.
func TestProcGone(t *testing.T) {
	for _, tc := range []struct {
		err  error
		gone bool
	}{
		{&fs.PathError{Op: "open", Path: "/proc/1/stat", Err: unix.ENOENT}, true},
		{&fs.PathError{Op: "read", Path: "/proc/1/stat", Err: unix.ESRCH}, true},
		{&fs.PathError{Op: "open", Path: "/proc/1/stat", Err: unix.EACCES}, false},
	} {
		if got := errors.Is(procGone(tc.err), fs.ErrNotExist); got != tc.gone {
			t.Errorf("procGone(%v) is gone: %v, want %v", tc.err, got, tc.gone)
		}
	}
}
