package tasks

import (
	"context"
	"syscall"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// orphanSweepTimeout bounds the sweep at start.
const orphanSweepTimeout = 30 * time.Second

// orphans picks, from what a driver holds, the containers of no task in
// known (task uids): pure, so the rule is tested on its own.
func orphans(held []driver.Owned, known map[string]bool) []driver.Owned {
	var out []driver.Owned
	for _, o := range held {
		if !known[o.TaskUID] {
			out = append(out, o)
		}
	}
	return out
}

// removeOrphans kills and removes the containers that drivers hold for
// this agent but no task it knows owns. It runs at start, after the local
// state is read and before any new task starts, so every task this agent
// may run is in m.tasks.
func (m *Manager) removeOrphans(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, orphanSweepTimeout)
	defer cancel()
	m.mu.Lock()
	known := make(map[string]bool, len(m.tasks))
	for uid := range m.tasks {
		known[uid] = true
	}
	m.mu.Unlock()
	for name, drv := range m.cfg.Drivers {
		inv, ok := drv.(driver.Inventory)
		if !ok {
			continue
		}
		held, err := inv.Inventory(ctx)
		if err != nil {
			m.log.Debug("cannot list the driver's containers; orphans are left as they are", "driver", name, "err", err)
			continue
		}
		for _, o := range orphans(held, known) {
			m.log.Warn("removing a container no task of this agent owns", "driver", name, "id", o.Handle.ID, "task_uid", o.TaskUID, "container", o.Container)
			_ = drv.Signal(ctx, o.Handle, syscall.SIGKILL)
			if err := drv.Destroy(ctx, o.Handle); err != nil {
				m.log.Warn("cannot remove an orphan container", "driver", name, "id", o.Handle.ID, "err", err)
			}
		}
	}
}
