package main

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

func newSnapshotCmd(e *cli.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save the cluster's whole state to a file, or restore it from one",
		Example: `  trellis snapshot save backup.snap
  trellis snapshot restore backup.snap`,
	}
	cmd.AddCommand(e.Command(cli.ClientCommand{
		Use:   "save FILE",
		Short: "Save a point-in-time snapshot of every resource to FILE",
		Long: `Save a consistent, point-in-time snapshot of every resource in the cluster
to FILE, taken by the leader. The file is written to FILE.part first and
renamed when complete, so FILE is never a partial snapshot.

The snapshot holds the Connect CA's private keys (a restore needs them):
FILE is written readable by its owner only (0600). Keep it, and every copy
of it, as you keep a private key.`,
		Example: `  trellis snapshot save backup.snap`,
		Args:    cobra.ExactArgs(1),
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			file := call.Args[0]
			part := file + ".part"
			f, err := createPrivate(part)
			if err != nil {
				return cli.Result{}, err
			}
			n, err := call.Client.SaveSnapshot(ctx, f)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(part)
				return cli.Result{}, err
			}
			if err := os.Rename(part, file); err != nil {
				return cli.Result{}, err
			}
			return cli.Say("saved snapshot to %s (%d bytes)", file, n), nil
		},
	}), e.Command(cli.ClientCommand{
		Use:   "restore FILE",
		Short: "Replace the cluster's whole state with a snapshot from FILE",
		Long: `Replace the state of every server in the cluster with the snapshot in FILE.
Everything written since the snapshot was taken is lost, and open watches
are told to list again. A file that is not a valid snapshot changes nothing.`,
		Example: `  trellis snapshot restore backup.snap`,
		Args:    cobra.ExactArgs(1),
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			f, err := os.Open(call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			defer f.Close()
			if err := call.Client.RestoreSnapshot(ctx, f); err != nil {
				return cli.Result{}, err
			}
			return cli.Say("restored snapshot from %s", call.Args[0]), nil
		},
	}))
	return cmd
}

// createPrivate creates path readable and writable by its owner only: a
// snapshot holds the CA's private keys. A file left there (a .part of an
// interrupted save, perhaps of a looser mode, or a symbolic link) is
// removed first, so the file written is always a new one of mode 0600.
func createPrivate(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}
