package server

import (
	"fmt"
	"maps"
	"slices"

	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// checkStatusOwners finds a status key owned by a controller the server
// does not run (running: the names of those it runs): nobody could ever
// write that key, and the name in a registration and a controller's
// would have drifted apart unseen. The server logs it at start;
// TestDefaultModulesRunEveryStatusKeyOwner holds the default modules to
// it.
func checkStatusOwners(types []resource.Registration, running map[string]bool) error {
	for _, reg := range types {
		for _, key := range slices.Sorted(maps.Keys(reg.Statuses)) {
			if c := reg.Statuses[key].Owner.Controller; c != "" && !running[c] {
				return fmt.Errorf("status key %q of %s is owned by the controller %q, which this server does not run", key, ids.TypeString(reg.Type), c)
			}
		}
	}
	return nil
}
