package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/charmbracelet/x/term"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/client/tui"
)

// chatCommand runs `picobot chat` and returns its exit code: 0 when the user
// quit, 1 on a failure, 2 on a usage error.
func chatCommand(args []string, stdin, stdout *os.File, stderr io.Writer) int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	url, agents, err := runChat(ctx, args, stdin, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagParse):
		return 2
	case errors.As(err, &ue):
		_, _ = fmt.Fprintf(stderr, "picobot chat: %s\nRun 'picobot chat -h' for usage.\n", ue.msg)
		return 2
	}
	_, _ = fmt.Fprintln(stderr, "picobot chat:", explain(err, url, agents))
	return 1
}

func runChat(ctx context.Context, args []string, stdin, stdout *os.File, stderr io.Writer) (string, []client.Agent, error) {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf clientFlags
	cf.register(fs)
	style := fs.String("style", markdownStyle(os.Getenv), "How answers' markdown is drawn: dark, light, notty (no colours), ascii, dracula, pink, tokyo-night ($GLAMOUR_STYLE; notty with $NO_COLOR).")
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), `Usage: picobot chat [flags]

Talks to an agent in a full-screen terminal UI: the reply streams in, tool
calls show dimmed on one line each (Ctrl+O opens them), slash commands
(/new /sessions /switch /rename /delete /compact /info /dump /mcp /help /stop)
go to the agent. Enter sends, Alt+Enter starts a new line, Ctrl+C stops a
running reply and quits when idle.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return "", nil, err
	}
	if fs.NArg() > 0 {
		return "", nil, usagef("unexpected argument %q (to send one message and print the reply, use picobot ask)", fs.Arg(0))
	}
	if !term.IsTerminal(stdin.Fd()) || !term.IsTerminal(stdout.Fd()) {
		return "", nil, usagef("picobot chat needs a terminal; for scripts use picobot ask")
	}
	c, err := cf.client()
	if err != nil {
		return "", nil, err
	}
	lookup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	agent, agents, err := resolveAgent(lookup, c, cf.agent)
	if err != nil && !errors.Is(err, errNoAgentChosen) {
		return c.URL(), agents, err
	}
	cfg := tui.Config{Client: c, Agents: agents, Agent: agent, ChatID: cf.chat, MarkdownStyle: *style,
		Explain: func(err error) string { return explain(err, c.URL(), agents) }}
	return c.URL(), agents, tui.Run(ctx, cfg, stdin, stdout)
}

// markdownStyle is the default of --style: $GLAMOUR_STYLE (glamour's own
// variable), no colours when $NO_COLOR is set (no-color.org), else dark.
func markdownStyle(env func(string) string) string {
	switch {
	case env("GLAMOUR_STYLE") != "":
		return env("GLAMOUR_STYLE")
	case env("NO_COLOR") != "":
		return "notty"
	}
	return "dark"
}
