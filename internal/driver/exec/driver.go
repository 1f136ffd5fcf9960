package exec

import (
	"fmt"
	"log/slog"
	"sync"

	"trellis.dev/trellis/internal/driver"
)

// Driver is the exec task driver. Create it with New; it is safe for
// concurrent use. The agent holds one per process: Logs readers learn of
// rotations from the Driver that rotates, so a reader from another Driver
// over the same files could read a rotated stretch twice or miss it.
type Driver struct {
	cfg Config
	log *slog.Logger

	cgOnce sync.Once
	cg     cgroups

	// forker forks the processes of a DieWithAgent driver.
	forker forker

	mu sync.Mutex
	// containers are the processes this Driver started or recovered, by
	// containerKey. An entry stays after the process exits, so that Wait
	// can still report how it ended, until Destroy.
	containers map[string]*container
	// logs, by log file path, keep rotation and Logs readers apart (a
	// reader never sees a file between the rotator's copy and its
	// truncate) and count rotations, so that a reader knows exactly how
	// many happened since it last looked.
	logs map[string]*logFile
}

var _ driver.Driver = (*Driver)(nil)

// New returns a Driver. It touches nothing on the host: the cgroup probe
// runs on first use (Fingerprint, Start or Recover).
func New(cfg Config) *Driver {
	cfg = cfg.withDefaults()
	return &Driver{
		cfg:        cfg,
		log:        cfg.Logger.With("driver", Name),
		containers: map[string]*container{},
		logs:       map[string]*logFile{},
	}
}

// Name is "exec".
func (d *Driver) Name() string { return Name }

// container is one process the Driver watches.
type container struct {
	pid int
	st  handleState
	// done is closed once the process has exited (and, when it was our
	// child, been reaped); exit is set before.
	done chan struct{}
	exit driver.Exit
}

func (c *container) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// containerKey names a process for the life of the host: a pid alone may be
// reused, a pid with its start time is not.
func containerKey(pid int, startTicks uint64) string {
	return fmt.Sprintf("%d@%d", pid, startTicks)
}

func (d *Driver) tracked(pid int, st handleState) *container {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.containers[containerKey(pid, st.StartTicks)]
}

// track records c unless the same process is already tracked, and returns
// the record in use.
func (d *Driver) track(c *container) (*container, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := containerKey(c.pid, c.st.StartTicks)
	if old, ok := d.containers[k]; ok {
		return old, false
	}
	d.containers[k] = c
	return c, true
}

func (d *Driver) forget(pid int, st handleState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.containers, containerKey(pid, st.StartTicks))
}

func (d *Driver) logFile(path string) *logFile {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.logs[path]
	if !ok {
		l = &logFile{}
		d.logs[path] = l
	}
	return l
}
