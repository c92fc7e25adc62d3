package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/picobot/picobot/runtime/buildinfo"
	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/device"
)

// nodeCmd runs `picobot node`: this machine as a paired device (the slim
// `picobot-node` binary runs the same command).
func nodeCmd(args []string) error {
	return device.Command(args, os.Stdin, os.Stdout, os.Stderr, buildinfo.Read().Version)
}

// nodesCmd runs `picobot nodes list|approve|reject|revoke`.
func nodesCmd(args []string, stdout io.Writer) error {
	fs := newFlags("nodes", `Usage: picobot nodes [flags] list [pending|approved|rejected|revoked]
       picobot nodes [flags] approve|reject|revoke <id>

Lists the tenant's paired nodes (picobot node) or decides on one.
`)
	var cf clientFlags
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	words := fs.Args()
	c, err := client.New(cf.url, client.Options{APIKey: cf.apiKey})
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case len(words) >= 1 && words[0] == "list" && len(words) <= 2:
		state := ""
		if len(words) == 2 {
			state = words[1]
		}
		list, err := c.Nodes(ctx, state)
		if err != nil {
			return err
		}
		return printNodes(stdout, list)
	case len(words) == 2 && (words[0] == node.DecisionApprove || words[0] == node.DecisionReject || words[0] == node.DecisionRevoke):
		n, err := c.DecideNode(ctx, words[1], words[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "Node %s (%s) is %s.\n", n.ID, n.Name, n.State)
		return err
	}
	fs.Usage()
	return errors.Join(errFlagParse, errors.New("want list [state], or approve|reject|revoke <id>"))
}

func printNodes(w io.Writer, list []client.Node) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "No nodes. Run 'picobot node' on a machine to pair it.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCONNECTED\tPLATFORM\tCAPABILITIES")
	for _, n := range list {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\n", n.ID, n.Name, n.State, n.Connected, n.Platform, strings.Join(n.Capabilities, ","))
	}
	return tw.Flush()
}
