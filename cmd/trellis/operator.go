package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

func newOperatorCmd(e *cli.Env) *cobra.Command {
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
	raft.AddCommand(newListPeersCmd(e), newRemovePeerCmd(e))
	cmd.AddCommand(raft)
	return cmd
}

func newListPeersCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "list-peers",
		Short: "List the servers of the Raft configuration and which one leads",
		Example: `  trellis operator raft list-peers
  trellis operator raft list-peers -o json`,
		Args:   cobra.NoArgs,
		Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			peers, err := call.Client.RaftPeers(ctx)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: peers, Table: func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tSERVER ADDRESS\tSTATE\tVOTER")
				for _, p := range peers {
					state := "follower"
					if p.Leader {
						state = "leader"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", p.ID, p.RaftAddr, p.ServerAddr, state, p.Voter)
				}
				return tw.Flush()
			}}, nil
		},
	})
}

func newRemovePeerCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "remove-peer ID|RAFT-ADDRESS",
		Short: "Remove a server that is gone for good from the Raft configuration",
		Long: `Remove a server from the Raft configuration, by its id or its Raft address
(as list-peers shows them). Use it for a server that will not come back, so
that it no longer counts towards the quorum. A removed server that is still
running stays out until it is restarted with an empty data directory.`,
		Example: `  trellis operator raft remove-peer 127.0.0.1:7702`,
		Args:    cobra.ExactArgs(1),
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			id, err := call.Client.RemovePeer(ctx, call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("removed server %s from the Raft configuration", id), nil
		},
	})
}
