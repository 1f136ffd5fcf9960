package exec

import (
	"log/slog"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// Defaults for the zero values of Config.
const (
	DefaultLogMaxBytes       = 10 << 20
	DefaultLogMaxFiles       = 3
	DefaultLogRotateInterval = time.Second
	DefaultLogFollowInterval = 250 * time.Millisecond
	DefaultCgroupRoot        = "/sys/fs/cgroup"
	DefaultCgroupParent      = "trellis"
)

// ExecOutputLimit bounds the output Driver.Exec returns.
const ExecOutputLimit = driver.ExecOutputLimit

// Config sets up a Driver. The zero value is usable: each zero field takes
// its default.
type Config struct {
	// Logger receives the driver's notes (cgroups unavailable, a rotation
	// that failed). Nil discards them.
	Logger *slog.Logger

	// LogMaxBytes is the size at which a log file is rotated.
	LogMaxBytes int64
	// LogMaxFiles is how many files of one stream are kept, the current
	// one included (as Docker's max-file): 3 keeps <name>, <name>.1 and
	// <name>.2. 1 keeps only the current file, truncated when full.
	LogMaxFiles int
	// LogRotateInterval is how often the rotator checks a container's log
	// sizes. A file may pass LogMaxBytes by what is written in one interval.
	LogRotateInterval time.Duration
	// LogFollowInterval is how often a following Logs reader looks for new
	// output once it has caught up.
	LogFollowInterval time.Duration

	// CgroupRoot is where the cgroup v2 hierarchy is mounted.
	CgroupRoot string
	// CgroupParent is the group under CgroupRoot that holds one group per
	// container; it is created on demand. A relative path; it may nest
	// ("trellis/agent-1").
	CgroupParent string

	// DieWithAgent gives every process a parent-death signal (SIGKILL):
	// it dies with the agent's process, however that ends. For an agent
	// that keeps nothing (trellis dev in memory), whose tasks nothing
	// would ever adopt. Without it, processes outlive the agent, which
	// adopts them when it restarts. Linux only.
	DieWithAgent bool
	// GroupLog, when set, is a file to which Start appends each
	// container's process group (its pid and start time) before it
	// returns: what KillGroups kills after the agent died, for processes
	// a container started that a parent-death signal does not reach
	// (they are not the agent's children) where no cgroup holds them.
	GroupLog string
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.LogMaxBytes <= 0 {
		c.LogMaxBytes = DefaultLogMaxBytes
	}
	if c.LogMaxFiles <= 0 {
		c.LogMaxFiles = DefaultLogMaxFiles
	}
	if c.LogRotateInterval <= 0 {
		c.LogRotateInterval = DefaultLogRotateInterval
	}
	if c.LogFollowInterval <= 0 {
		c.LogFollowInterval = DefaultLogFollowInterval
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	return c
}
