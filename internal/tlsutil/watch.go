package tlsutil

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// WatchSIGHUP reloads c's files on every SIGHUP until ctx ends, logging
// each outcome; a failed reload keeps the certificates in use. It blocks.
func WatchSIGHUP(ctx context.Context, c *Configurator, log *slog.Logger) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	defer signal.Stop(sigs)
	watchReloads(ctx, c, log, sigs)
}

// watchReloads is WatchSIGHUP's loop, apart from the signal so that a
// test can drive it.
func watchReloads(ctx context.Context, c *Configurator, log *slog.Logger, sigs <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			if err := c.Reload(); err != nil {
				log.Error("TLS reload failed; the certificates loaded before stay in use", "err", err)
				continue
			}
			attrs := []any{}
			if cert := c.Certificate(); cert != nil {
				attrs = append(attrs, "serial", cert.SerialNumber.Text(16), "expires", cert.NotAfter.UTC().Format(time.RFC3339))
			}
			log.Info("TLS certificates reloaded", attrs...)
		}
	}
}
