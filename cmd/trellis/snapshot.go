package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newSnapshotCmd(e *env, cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save the cluster's whole state to a file, or restore it from one",
		Example: `  trellis snapshot save backup.snap
  trellis snapshot restore backup.snap`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Save a point-in-time snapshot of every resource to FILE",
		Long: `Save a consistent, point-in-time snapshot of every resource in the cluster
to FILE, taken by the leader. The file is written to FILE.part first and
renamed when complete, so FILE is never a partial snapshot.`,
		Example: `  trellis snapshot save backup.snap`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			part := args[0] + ".part"
			f, err := os.Create(part)
			if err != nil {
				return err
			}
			n, err := c.SaveSnapshot(cmd.Context(), f)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(part)
				return serverError(c, err)
			}
			if err := os.Rename(part, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "saved snapshot to %s (%d bytes)\n", args[0], n)
			return nil
		},
	}, &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the cluster's whole state with a snapshot from FILE",
		Long: `Replace the state of every server in the cluster with the snapshot in FILE.
Everything written since the snapshot was taken is lost, and open watches
are told to list again. A file that is not a valid snapshot changes nothing.`,
		Example: `  trellis snapshot restore backup.snap`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			if err := c.RestoreSnapshot(cmd.Context(), f); err != nil {
				return serverError(c, err)
			}
			fmt.Fprintf(e.stdout, "restored snapshot from %s\n", args[0])
			return nil
		},
	})
	return cmd
}
