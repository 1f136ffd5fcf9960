package redirect

import (
	"errors"
	"fmt"

	"trellis.dev/trellis/internal/netns"
)

// InNetns runs fn on an OS thread that is in the network namespace at
// path (/run/netns/NAME, /proc/PID/ns/net): the sockets fn opens and the
// processes it starts are in that namespace; goroutines it starts are
// not (see netns.Do). A namespace that cannot be entered is refused
// naming --netns; fn's own errors come back as they are.
func InNetns(path string, fn func() error) error {
	err := netns.Do(path, fn)
	if ee := (*netns.EnterError)(nil); errors.As(err, &ee) {
		return fmt.Errorf("--netns: %w", err)
	}
	return err
}
