package embedded

import (
	"context"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/sessionrt"
)

// Complete implements gateway.StatelessBackend: one turn of the agent on
// exactly the client's messages, in the request's goroutine, with no
// session, no bus message and nothing of the conversation stored
// (agenthost.Built.Complete).
func (r *Runtime) Complete(ctx context.Context, c gateway.Completion) (gateway.Completed, error) {
	a, ta, err := r.scope(ctx, c.Agent)
	if err != nil {
		return gateway.Completed{}, err
	}
	g := a.gen()
	if !g.info.Ready {
		return gateway.Completed{}, gateway.Errorf(gateway.CodeNoModel, "agent %s has no usable model (%s): %s", a.name, g.info.Reason, g.info.Message)
	}
	ctx, timer := r.opts.Metrics.StartTurn(ctx, ta.tenant, a.name)
	out, err := g.Complete(ctx, c.Stateless, c.Stream, c.Sink)
	timer.End(sessionrt.Outcome(err))
	if err != nil {
		ce, known := sessionrt.Coded(err)
		if !known {
			r.log.Error("Stateless turn failed", "agent", a.name, "err", err)
		}
		return gateway.Completed{}, ce
	}
	return gateway.Completed{Text: out.Text, ToolCalls: out.ToolCalls}, nil
}

var _ gateway.StatelessBackend = (*Runtime)(nil)
