package device

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultGatewayURL is where a node connects when neither --url nor
// $PICOBOT_URL says (the address `picobot serve` listens on).
const DefaultGatewayURL = "http://127.0.0.1:8080"

// Command is `picobot node` (and the slim `picobot-node` binary): it
// parses args, pairs this machine and serves until a signal or the user's
// refusal. flag.ErrHelp is returned for -h.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer, version string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), `Usage: picobot node [flags]

Pairs this machine with a PicoBot gateway as a node the tenant's agents can reach
(docs/nodes.md). It connects out to the gateway's WebSocket with your API key (no
port is opened here) and waits until you approve it: in the web UI, with
'picobot nodes approve <id>', in 'picobot chat' (/nodes), or by asking the agent.
A command an agent wants to run here runs only when the allowlist permits it or
you answer y at the prompt on this terminal.

Flags:
`)
		fs.PrintDefaults()
	}
	url := os.Getenv("PICOBOT_URL")
	if url == "" {
		url = DefaultGatewayURL
	}
	gw := fs.String("url", url, "Gateway URL ($PICOBOT_URL, else "+DefaultGatewayURL+").")
	key := fs.String("api-key", os.Getenv("PICOBOT_API_KEY"), "API key ($PICOBOT_API_KEY).")
	name := fs.String("name", "", "Name shown for this node (default: the host name).")
	stateDir := fs.String("state", defaultDir(), "Folder of the node's id and allowlist.")
	allowlist := fs.String("allowlist", "", "File of commands that run without asking (default <state>/allowlist; one command a line, globs, a last word ** for any arguments).")
	reset := fs.Bool("reset", false, "Pair as a new node (a new id), e.g. after the old one was rejected or revoked.")
	noPrompt := fs.Bool("no-prompt", false, "Never ask: refuse every command the allowlist does not permit.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	id, err := LoadID(*stateDir, *reset)
	if err != nil {
		return err
	}
	if *allowlist == "" {
		*allowlist = filepath.Join(*stateDir, "allowlist")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var prompt Prompter
	if !*noPrompt {
		prompt = NewTerminal(stdin, stdout)
	}
	n, err := New(Config{Gateway: *gw, APIKey: *key, ID: id, Name: *name, Version: version,
		Allowlist: *allowlist, Prompt: prompt, Log: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, _ = fmt.Fprintf(stderr, "PicoBot node %s offers %s; connecting to %s\n", id, strings.Join(n.Capabilities(), ", "), *gw)
	err = n.Run(ctx)
	if errors.Is(err, ErrRefused) {
		return fmt.Errorf("%w (picobot node --reset pairs this machine again under a new id)", err)
	}
	return err
}

// defaultDir is the node's folder in the user's configuration folder.
func defaultDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ".picobot-node"
	}
	return filepath.Join(dir, "picobot", "node")
}
