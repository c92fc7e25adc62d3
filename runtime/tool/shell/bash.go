package shell

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/tool"
)

const (
	defaultBashTimeout = 60
	maxBashTimeout     = 600
	// Output kept of a bash command: about 50,000 characters, the first and
	// last halves.
	outputHead = 20_000
	outputTail = 30_000
)

// bashArgs are the arguments of bash.
type bashArgs struct {
	Command string `json:"command" jsonschema:"the bash command (or script) to run"`
	Timeout int    `json:"timeout,omitempty" jsonschema:"seconds before the command is killed; default 60, max 600"`
}

// NewBash returns the bash tool: run one command in the session's workspace
// and wait for it. It is Exclusive because commands change the workspace the
// other tools look at.
func NewBash(opts ...Option) tool.Tool {
	b := &bash{cfg: newConfig(opts)}
	return tool.New("bash",
		"Run a bash command in the workspace; returns stdout+stderr (max ~50,000 chars, middle cut) and the exit code. "+
			"Timeout 60 s by default, max 600 s; on timeout everything it started is killed. Stdin is empty and background "+
			"jobs (&) die with the command: use exec for long-running programs and pty for interactive ones.",
		b.run,
		tool.Exclusive(),
		tool.Range("timeout", tool.Bound(1), tool.Bound(maxBashTimeout)),
	)
}

type bash struct {
	cfg config
}

func (b *bash) run(ctx context.Context, env tool.Env, args bashArgs) (tool.Result, error) {
	if strings.TrimSpace(args.Command) == "" {
		return tool.Errorf("error: command is empty; pass the bash command to run."), nil
	}
	if r, err := b.cfg.permit(ctx, env, "bash", args.Command); r != nil || err != nil {
		return deref(r), err
	}
	timeout := time.Duration(args.Timeout) * time.Second
	if args.Timeout == 0 {
		timeout = defaultBashTimeout * time.Second
	}
	out := newHeadTail(outputHead, outputTail)
	ch, _, err := b.cfg.startChild(env.Workspace, args.Command, out, false)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	select {
	case <-ch.exited:
	case <-timer.C:
		timedOut = true
		ch.kill()
	case <-ctx.Done():
		ch.kill()
	}
	ch.finish()

	output := out.String()
	switch {
	case timedOut:
		return tool.Errorf("error: command killed after %d s (timeout), with everything it started. Output so far:\n%s\n\n"+
			"If it needs longer, call again with a larger timeout (max %d s) or run it with exec in the background.",
			int(timeout/time.Second), orNone(output), maxBashTimeout), nil
	case ctx.Err() != nil:
		return tool.Result{}, fmt.Errorf("failed to finish command: %w", ctx.Err())
	}
	_, summary := ch.exitSummary()
	return tool.Text(fmt.Sprintf("%s\n[%s]", orNone(output), summary)), nil
}

// orNone says "(no output)" rather than showing nothing.
func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no output)"
	}
	return strings.TrimRight(s, "\n")
}

// deref is the result permit returned instead of running (the zero result
// with an error).
func deref(r *tool.Result) tool.Result {
	if r == nil {
		return tool.Result{}
	}
	return *r
}
