// Package harness is what the benchmark commands that measure a trellis
// binary (cabench, carotbench, failoverbench, orchbench) do around their
// measurements, the same way each: check the binary named by -trellis, make
// a working directory for the data dirs and logs of what they start, open
// the report (-out), head it with what ran where, and at the end keep the
// working directory (on failure or -keep) or remove it; and, for those
// made of cells, read -cells. peerbench takes its working directory,
// report and title from it too.
//
// The measurements, their cells and their report lines stay in the
// commands. The header names the binary, the machine's CPUs and its load
// because a figure read without them cannot be compared with another.
package harness

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"trellis.dev/trellis/bench/internal/report"
	"trellis.dev/trellis/internal/testcluster"
)

// Binary returns the trellis binary's path made absolute (the commands
// start servers whose working directory is not theirs), once it is known
// to exist; the error names the -trellis flag and says to build first.
func Binary(path string) (string, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("-trellis: %v (make build first)", err)
	}
	return path, nil
}

// Run is one run of a benchmark command: its working directory and its
// report.
type Run struct {
	// Name is the command's: the report's title, the working directory's
	// prefix and the first word of what End says on standard error.
	Name string
	// Dir is the working directory, made empty under the system's
	// temporary directory.
	Dir string
	// Out is the report: standard output, and the -out file when one was
	// named.
	Out io.Writer

	closeOut func() error
}

// Start makes the working directory of a run of the command name and
// opens its report, also written to outPath unless that is empty. Nothing
// is left behind when it fails.
func Start(name, outPath string) (*Run, error) {
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, err
	}
	out, closeOut, err := report.Output(outPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Run{Name: name, Dir: dir, Out: out, closeOut: closeOut}, nil
}

// Title writes the report's title: the command's name and the time, UTC.
func (r *Run) Title() {
	io.WriteString(r.Out, title(r.Name, time.Now()))
}

// Header writes the title, then a line that names the trellis binary,
// says detail right after it (", server flags `...`", for instance), and
// gives the machine's CPUs and its load average now.
func (r *Run) Header(trellis, detail string) {
	io.WriteString(r.Out, title(r.Name, time.Now())+setting(trellis, detail, runtime.NumCPU(), testcluster.LoadAvg()))
}

// End closes the report, then removes the working directory, or, when
// keep is set, leaves it and says on standard error that what it holds
// (kept: "data dirs and logs", say) is kept there.
func (r *Run) End(keep bool, kept string) {
	r.closeOut()
	if keep {
		fmt.Fprintf(os.Stderr, "%s: %s kept in %s\n", r.Name, kept, r.Dir)
		return
	}
	os.RemoveAll(r.Dir)
}

func title(name string, now time.Time) string {
	return fmt.Sprintf("# %s %s\n\n", name, now.UTC().Format(time.RFC3339))
}

func setting(trellis, detail string, cpus int, load string) string {
	return fmt.Sprintf("Trellis `%s`%s. %d CPUs; load average at the start %s.\n\n", trellis, detail, cpus, load)
}
