// Package report is what the benchmark commands share to print their
// results: where a report goes, and how durations are rounded in it.
package report

import (
	"io"
	"os"
	"time"
)

// Output is standard output, and also the file at path when path is not
// empty (created or truncated). close closes the file; call it when the
// report is written.
func Output(path string) (w io.Writer, close func() error, err error) {
	if path == "" {
		return os.Stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return io.MultiWriter(os.Stdout, f), f.Close, nil
}

// Round keeps a duration's meaningful digits for a table: 10 ms steps
// from a second up, 10 µs steps from a millisecond up, else microseconds.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
