package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

func newOperatorCmd(e *env, cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Operate the server cluster (Raft peers)",
		Example: `  trellis operator raft list-peers
  trellis operator raft remove-peer 127.0.0.1:7702`,
	}
	raft := &cobra.Command{
		Use:   "raft",
		Short: "Inspect and change the Raft configuration of the server cluster",
		Example: `  trellis operator raft list-peers
  trellis operator raft remove-peer 127.0.0.1:7702`,
	}
	raft.AddCommand(newListPeersCmd(e, cf), newRemovePeerCmd(e, cf))
	cmd.AddCommand(raft)
	return cmd
}

func newListPeersCmd(e *env, cf *clientFlags) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "list-peers",
		Short: "List the servers of the Raft configuration and which one leads",
		Example: `  trellis operator raft list-peers
  trellis operator raft list-peers -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			peers, err := c.RaftPeers(cmd.Context())
			if err != nil {
				return serverError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, peers)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tSERVER ADDRESS\tSTATE\tVOTER")
			for _, p := range peers {
				state := "follower"
				if p.Leader {
					state = "leader"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", p.ID, p.RaftAddr, p.ServerAddr, state, p.Voter)
			}
			return tw.Flush()
		},
	}
	addOutputFlag(cmd, &out)
	return cmd
}

func newRemovePeerCmd(e *env, cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-peer ID|RAFT-ADDRESS",
		Short: "Remove a server that is gone for good from the Raft configuration",
		Long: `Remove a server from the Raft configuration, by its id or its Raft address
(as list-peers shows them). Use it for a server that will not come back, so
that it no longer counts towards the quorum. A removed server that is still
running stays out until it is restarted with an empty data directory.`,
		Example: `  trellis operator raft remove-peer 127.0.0.1:7702`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			id, err := c.RemovePeer(cmd.Context(), args[0])
			if err != nil {
				return serverError(c, err)
			}
			fmt.Fprintf(e.stdout, "removed server %s from the Raft configuration\n", id)
			return nil
		},
	}
}
