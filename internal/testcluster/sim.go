package testcluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
)

// Sim is one `trellis sim` process: many simulated instances, each a real
// agent on the simulated driver, in one process. Pausing it silences all
// of its instances at once, as a network partition would; killing it
// loses what its tasks "ran" (the simulated driver keeps it in memory),
// while its data directory keeps what its agents knew.
type Sim struct {
	Label   string // names its data directory and log
	Prefix  string // its instances are Prefix1 ... PrefixN
	Count   int
	DataDir string
	LogPath string

	process
}

// SimOptions says how to start a fleet.
type SimOptions struct {
	Bin string // the trellis binary
	// Dir is where the fleet's data directory (Dir/Label) and log
	// (Dir/Label.log) go.
	Dir       string
	Label     string
	Prefix    string
	Instances int
	// Servers are gRPC addresses of servers (Member.GRPCAddr).
	Servers []string
	// Attributes are given to every instance (-attribute key=value).
	Attributes map[string]string
	// Zones > 0 spreads zone=zone-1 ... zone-K round-robin (-zones).
	Zones int
	// Extra flags for `trellis sim`.
	Extra []string
}

// StartSim starts a fleet and returns at once; its instances register on
// their own (wait for them through the API).
func StartSim(o SimOptions) (*Sim, error) {
	if o.Label == "" || o.Prefix == "" || o.Instances < 1 || len(o.Servers) == 0 {
		return nil, errors.New("testcluster: a fleet needs a label, a name prefix, instances and at least one server")
	}
	s := &Sim{
		Label:   o.Label,
		Prefix:  o.Prefix,
		Count:   o.Instances,
		DataDir: filepath.Join(o.Dir, o.Label),
		LogPath: filepath.Join(o.Dir, o.Label+".log"),
	}
	args := []string{"sim", "-instances", strconv.Itoa(o.Instances), "-name-prefix", o.Prefix, "-data-dir", s.DataDir}
	args = append(args, serverAndAttributeFlags(o.Servers, o.Attributes)...)
	if o.Zones > 0 {
		args = append(args, "-zones", strconv.Itoa(o.Zones))
	}
	args = append(args, o.Extra...)
	s.process = process{name: "sim " + o.Label, bin: o.Bin, args: args, logPath: s.LogPath}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Names are the names of the fleet's instances.
func (s *Sim) Names() []string {
	out := make([]string, s.Count)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", s.Prefix, i+1)
	}
	return out
}
