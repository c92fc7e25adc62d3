package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/picobot/picobot/runtime/buildinfo"
	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/device"
)

// nodeCmd runs `picobot node`: this machine as a paired device.
func nodeCmd(args []string) error {
	fs := newFlags("node", `Usage: picobot node [flags]

Pairs this machine with a PicoBot gateway as a node the tenant's agents can reach
(docs/nodes.md). It connects out to the gateway's WebSocket with your API key (no
port is opened here) and waits until you approve it: in the web UI, with
'picobot nodes approve <id>', in 'picobot chat' (/nodes), or by asking the agent.
A command an agent wants to run here runs only when the allowlist permits it or
you answer y at the prompt on this terminal.
`)
	url := os.Getenv("PICOBOT_URL")
	if url == "" {
		url = defaultGatewayURL
	}
	gw := fs.String("url", url, "Gateway URL ($PICOBOT_URL, else "+defaultGatewayURL+").")
	key := fs.String("api-key", os.Getenv("PICOBOT_API_KEY"), "API key ($PICOBOT_API_KEY).")
	name := fs.String("name", "", "Name shown for this node (default: the host name).")
	stateDir := fs.String("state", defaultNodeDir(), "Folder of the node's id and allowlist.")
	allowlist := fs.String("allowlist", "", "File of commands that run without asking (default <state>/allowlist; one command a line, globs, a last word ** for any arguments).")
	reset := fs.Bool("reset", false, "Pair as a new node (a new id), e.g. after the old one was rejected or revoked.")
	noPrompt := fs.Bool("no-prompt", false, "Never ask: refuse every command the allowlist does not permit.")
	if err := parse(fs, args); err != nil {
		return err
	}
	id, err := device.LoadID(*stateDir, *reset)
	if err != nil {
		return err
	}
	if *allowlist == "" {
		*allowlist = filepath.Join(*stateDir, "allowlist")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var prompt device.Prompter
	if !*noPrompt {
		prompt = device.NewTerminal(os.Stdin, os.Stdout)
	}
	n, err := device.New(device.Config{Gateway: *gw, APIKey: *key, ID: id, Name: *name, Version: buildinfo.Read().Version,
		Allowlist: *allowlist, Prompt: prompt, Log: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "PicoBot node %s offers %s; connecting to %s\n", id, strings.Join(n.Capabilities(), ", "), *gw)
	return n.Run(ctx)
}

// defaultNodeDir is the node's folder in the user's configuration folder.
func defaultNodeDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ".picobot-node"
	}
	return filepath.Join(dir, "picobot", "node")
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
