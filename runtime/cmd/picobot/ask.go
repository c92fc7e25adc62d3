package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/client"
)

// maxAskText is the largest message the gateway takes (gateway.MaxTextBytes).
const maxAskText = 64 << 10

// maxVerboseResult bounds a tool result printed by -v.
const maxVerboseResult = 2000

// stopGrace is how long an interrupted ask waits for the gateway to confirm
// the stop.
const stopGrace = 10 * time.Second

// askCommand runs `picobot ask` and returns its exit code: 0 on a reply, 1
// on a failure, 2 on a usage error.
func askCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	a := &asker{stdin: stdin, stdout: stdout, stderr: stderr}
	err := a.run(ctx, args)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagParse):
		return 2 // the flag package said what was wrong
	case errors.As(err, &ue):
		_, _ = fmt.Fprintf(stderr, "picobot ask: %s\nRun 'picobot ask -h' for usage.\n", ue.msg)
		return 2
	}
	_, _ = fmt.Fprintln(stderr, "picobot ask:", explain(err, a.url, a.agents))
	return 1
}

// asker is one run of `picobot ask`.
type asker struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	verbose        bool

	url    string
	agents []client.Agent
	// lineOpen is set while the reply's last line has no newline yet.
	lineOpen bool
}

func (a *asker) run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ask", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	var cf clientFlags
	cf.register(fs)
	fs.BoolVar(&a.verbose, "v", false, "Print tool calls and their results to stderr.")
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), `Usage: picobot ask [flags] <text>   (text "-" reads it from stdin)

Sends one message to an agent through the gateway and prints the reply as it
streams in. Exit code: 0 on a reply, 1 on a failure, 2 on a usage error.

Flags:
`)
		fs.PrintDefaults()
	}
	words, err := parseInterleaved(fs, args, a.stdout, a.stderr)
	if err != nil {
		return err
	}
	text, err := a.text(words)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	a.url = c.URL()

	lookup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	agent, agents, err := resolveAgent(lookup, c, cf.agent)
	a.agents = agents
	if err != nil {
		return err
	}
	conn, err := c.Dial(lookup)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	turn, err := conn.Send(ctx, client.Send{Agent: agent, ChatID: cf.chat, Text: text})
	if err != nil {
		return err
	}
	reply, err := turn.Wait(ctx, a.show)
	if ctx.Err() != nil { // interrupted: stop the turn on the gateway too
		reply, err = a.interrupt(conn, turn, agent, cf.chat)
	}
	if err != nil {
		a.endLine()
		return err
	}
	if reply.Command && reply.Failed { // said on stderr, exit 1
		return fmt.Errorf("/%s: %s", strings.TrimPrefix(strings.Fields(text)[0], "/"), reply.Text)
	}
	if reply.Streamed == "" && reply.Text != "" {
		a.write(reply.Text)
	}
	a.endLine()
	if a.verbose {
		_, _ = fmt.Fprintln(a.stderr, "[session]", reply.Session)
	}
	return nil
}

// text is the message: the words, or stdin for "-".
func (a *asker) text(words []string) (string, error) {
	text := strings.Join(words, " ")
	if len(words) == 1 && words[0] == "-" {
		b, err := io.ReadAll(io.LimitReader(a.stdin, maxAskText+1))
		if err != nil {
			return "", fmt.Errorf("failed to read the message from stdin: %w", err)
		}
		text = string(b)
	}
	switch {
	case strings.TrimSpace(text) == "":
		return "", usagef("no message: give the text as an argument, or - to read it from stdin")
	case len(text) > maxAskText:
		return "", usagef("the message is over %d bytes, the gateway's limit", maxAskText)
	}
	return text, nil
}

// interrupt stops the running turn after Ctrl+C and waits for the gateway
// to confirm it.
func (a *asker) interrupt(conn *client.Conn, turn *client.Turn, agent, chat string) (client.Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	if _, err := conn.Stop(ctx, agent, chat); err != nil {
		return client.Reply{}, err
	}
	reply, err := turn.Wait(ctx, a.show)
	if err == nil {
		err = &client.Error{Code: client.CodeStopped, Message: "interrupted"}
	}
	return reply, err
}

// show prints an event: reply text to stdout, tools to stderr with -v.
func (a *asker) show(e client.Event) {
	switch e.Kind {
	case client.KindDelta:
		a.write(e.Text)
	case client.KindToolCall:
		a.endLine() // text before a tool call ends its line
		if a.verbose {
			_, _ = fmt.Fprintf(a.stderr, "[tool] %s %s\n", e.Name, e.Arguments)
		}
	case client.KindToolResult:
		if a.verbose {
			label := "[result]"
			if e.IsError {
				label = "[tool error]"
			}
			content := e.Content
			if len(content) > maxVerboseResult {
				content = content[:maxVerboseResult] + "…"
			}
			_, _ = fmt.Fprintf(a.stderr, "%s %s: %s\n", label, e.Name, strings.TrimRight(content, "\n"))
		}
	}
}

func (a *asker) write(s string) {
	if s == "" {
		return
	}
	_, _ = io.WriteString(a.stdout, s)
	a.lineOpen = !strings.HasSuffix(s, "\n")
}

// endLine ends the reply's last line, if open.
func (a *asker) endLine() {
	if a.lineOpen {
		_, _ = io.WriteString(a.stdout, "\n")
		a.lineOpen = false
	}
}

// parseInterleaved parses flags that may come before or after the words
// (`picobot ask hello --agent x`); everything after "--" is words.
func parseInterleaved(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	var words []string
	for {
		if err := parseFlags(fs, args, stdout, stderr); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(words, rest...), nil
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
}
