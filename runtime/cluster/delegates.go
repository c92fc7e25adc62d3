package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// A delegated task runs in the session pods of its target Agent, which
// alone hold that Agent's model keys, tools, MCP servers and sandbox: the
// delegating pod queues it the way the gateway queues a chat message — on
// the chat stream of the run's own chat (channel protocol.ChannelDelegate,
// chat key the run id), with a wake when the chat has no runtime — and
// waits for its outcome on the chat's event channel. So a run gets what a
// chat message gets: a warm pod or a new one, exactly one answer, and when
// its pod dies mid-turn, the next one resumes it from its stored steps. The
// message carries the run's narrowed tools and depth (protocol.Delegation).
//
// A session pod's Redis user reaches only its tenant's keys, so it queues the
// wake on the target's wake stream alone, not on the operator's shared
// notice stream: a warm pod claims it at once, and the operator, which looks
// at the wake streams of a busy agent's delegate targets on each of its
// resyncs, starts a pod for it otherwise. Every name here is in the pod's
// tenant (its namespace), so a target in another tenant cannot be named.

// DefaultDelegateTimeout bounds a delegated run.
const DefaultDelegateTimeout = 30 * time.Minute

// Delegates is the delegate tool's Runner in a session pod.
type Delegates struct {
	// Tenant is the pod's; every target Agent is read there.
	Tenant string
	Bus    bus.Bus
	Redis  *redis.Client
	// Kube reads the target Agents (the pod's client: get on its
	// namespace's Agents).
	Kube client.Reader
	// Rewake is how often a waiting run checks that its chat has a
	// runtime, waking one when it has none (its pod died): 2s when zero.
	Rewake time.Duration
	// Timeout bounds a run (DefaultDelegateTimeout when zero).
	Timeout time.Duration
	Log     *slog.Logger
}

var _ delegate.Runner = (*Delegates)(nil)

// agent reads a target Agent of the tenant.
func (d *Delegates) agent(ctx context.Context, name string) (*picobotv1alpha1.Agent, error) {
	var a picobotv1alpha1.Agent
	if err := d.Kube.Get(ctx, client.ObjectKey{Namespace: d.Tenant, Name: name}, &a); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no agent %q: %w", name, delegate.ErrUnknownAgent)
		}
		return nil, fmt.Errorf("failed to read agent %q: %w", name, err)
	}
	return &a, nil
}

// Tools implements delegate.Runner: the target's effective tools as the
// operator publishes them in its status, minus todo. (Its MCP servers'
// tools are known only to its pods, so allowed_tools cannot name them.)
func (d *Delegates) Tools(ctx context.Context, agent string) ([]string, error) {
	a, err := d.agent(ctx, agent)
	if err != nil {
		return nil, err
	}
	if !meta.IsStatusConditionTrue(a.Status.Conditions, picobotv1alpha1.ConditionToolsResolved) {
		return nil, fmt.Errorf("failed to read the tools of agent %q: the operator has not resolved them (see its ToolsResolved condition)", agent)
	}
	return agenthost.SubAgentTools(a.Status.EffectiveTools), nil
}

// ready checks that a target Agent exists and can run tasks.
func (d *Delegates) ready(ctx context.Context, name string) error {
	a, err := d.agent(ctx, name)
	if err != nil {
		return err
	}
	if c := meta.FindStatusCondition(a.Status.Conditions, picobotv1alpha1.ConditionReady); c == nil || c.Status != "True" {
		why := "the operator has not reconciled it yet"
		if c != nil {
			why = c.Reason + ": " + c.Message
		}
		return fmt.Errorf("agent %s cannot run tasks now (%s): %w", name, why, errNotRunnable)
	}
	return nil
}

// errNotRunnable marks a target Agent that is not Ready.
var errNotRunnable = errors.New("not ready")

// Run implements delegate.Runner: it queues the task on the run's chat
// stream, wakes a runtime of the target and waits for the outcome. ctx
// ending stops the run's turn.
func (d *Delegates) Run(ctx context.Context, req delegate.Request) (string, string, error) {
	if err := d.ready(ctx, req.Agent); err != nil {
		return "", "", err
	}
	rewake, timeout := d.Rewake, d.Timeout
	if rewake <= 0 {
		rewake = 2 * time.Second
	}
	if timeout <= 0 {
		timeout = DefaultDelegateTimeout
	}
	sig, ch, chat := signals{d.Redis}, protocol.ChannelDelegate, req.RunID
	ps, events, err := sig.subscribe(ctx, eventChannel(d.Tenant, req.Agent, ch, chat))
	if err != nil {
		return "", "", fmt.Errorf("failed to wait for the run of agent %q: %w", req.Agent, err)
	}
	defer func() { _ = ps.Close() }()
	if err := d.queue(ctx, req, delegate.Depth(ctx)); err != nil {
		return "", "", err
	}
	d.ensureRuntime(ctx, req.Agent, chat)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(rewake)
	defer tick.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return "", "", fmt.Errorf("lost the event subscription of the run of agent %q", req.Agent)
			}
			if e.MessageID != req.RunID {
				continue
			}
			if e.Err != nil {
				return "", "", fmt.Errorf("the session pod of agent %q answered in a format this pod cannot read: %w", req.Agent, e.Err)
			}
			switch e.Kind {
			case protocol.FrameDone:
				return e.Outcome.Text, e.Outcome.SessionID, nil
			case protocol.FrameError:
				sid := ""
				if e.Outcome != nil {
					sid = e.Outcome.SessionID
				}
				return "", sid, fmt.Errorf("the run of agent %q failed (%s): %s", req.Agent, e.Code, e.Message)
			}
		case <-tick.C:
			// As the gateway does for a message: a target that can no
			// longer run (its pods cannot start, it was deleted) fails the
			// run rather than leave it waiting.
			switch err := d.ready(ctx, req.Agent); {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, errNotRunnable) || errors.Is(err, delegate.ErrUnknownAgent):
				d.stop(ctx, req.Agent, chat)
				return "", "", err
			default:
				d.log().Warn("Could not check a delegate target; still waiting", "agent", req.Agent, "run", chat, "err", err)
			}
			d.ensureRuntime(ctx, req.Agent, chat)
		case <-deadline.C:
			d.stop(ctx, req.Agent, chat)
			return "", "", fmt.Errorf("the run of agent %q did not finish within %s", req.Agent, timeout)
		case <-ctx.Done():
			// The delegating turn was stopped: so is the run's. A run no
			// pod has taken yet is refused by the pod that takes it, which
			// finds its agent_runs record no longer running.
			d.stop(ctx, req.Agent, chat)
			return "", "", ctx.Err()
		}
	}
}

// ensureRuntime queues a wake for the run's chat unless a runtime owns it
// (none yet, or its pod died mid-turn).
func (d *Delegates) ensureRuntime(ctx context.Context, agent, chat string) {
	owned, err := signals{d.Redis}.owned(ctx, ownerKey(d.Tenant, agent, protocol.ChannelDelegate, chat))
	if err == nil && !owned {
		err = wake.Queue(ctx, d.Bus, Wake{Tenant: d.Tenant, Agent: agent, Channel: protocol.ChannelDelegate, ChatKey: chat})
	}
	if err != nil && ctx.Err() == nil {
		d.log().Error("Failed to wake a runtime for a delegated run", "agent", agent, "run", chat, "err", err)
	}
}

// stop asks the runtime serving the run's chat to stop its turn.
func (d *Delegates) stop(ctx context.Context, agent, chat string) {
	err := signals{d.Redis}.publish(context.WithoutCancel(ctx), controlChannel(d.Tenant, agent, protocol.ChannelDelegate, chat),
		protocol.Frame{Kind: protocol.FrameStop})
	if err != nil {
		d.log().Error("Failed to stop a delegated run", "agent", agent, "run", chat, "err", err)
	}
}

func (d *Delegates) log() *slog.Logger {
	if d.Log == nil {
		return slog.Default()
	}
	return d.Log
}

// SubAgentRuns runs, in the session pod of agent, the delegated tasks its
// chat streams carry (sessionrt.Config.Delegated): each turn runs on a
// sub-agent session config of the pod's agent (subAgent, given the run's
// narrowed tools), at the run's depth. A run whose agent_runs record is no
// longer running — its delegating turn was stopped or gave up before any pod
// took it — is refused rather than run for nobody, and so is a message that
// names no run of this agent.
func SubAgentRuns(runs interface {
	GetAgentRun(ctx context.Context, id string) (store.AgentRun, error)
}, agent string, subAgent func(tools []string, background bool) (session.Config, error),
) func(ctx context.Context, d protocol.Delegation) (context.Context, *session.Manager, error) {
	return func(ctx context.Context, d protocol.Delegation) (context.Context, *session.Manager, error) {
		run, err := runs.GetAgentRun(ctx, d.RunID)
		for backoff := time.Duration(0); errors.Is(err, store.ErrUnavailable); run, err = runs.GetAgentRun(ctx, d.RunID) {
			// PostgreSQL restarting: the message waits, as a turn's does.
			if backoff = sessionrt.NextBackoff(backoff); !sessionrt.Sleep(ctx, backoff) {
				return nil, nil, ctx.Err()
			}
		}
		switch {
		case errors.Is(err, store.ErrNotFound) || (err == nil && run.Agent != agent):
			return nil, nil, &protocol.CodedError{Code: protocol.CodeBadRequest, Err: fmt.Errorf("no delegated run %q of agent %q", d.RunID, agent)}
		case err != nil:
			return nil, nil, fmt.Errorf("failed to read delegated run %q: %w", d.RunID, err)
		case run.Status != store.RunRunning:
			return nil, nil, &protocol.CodedError{Code: protocol.CodeStopped,
				Err: fmt.Errorf("delegated run %q is %s: its delegating turn no longer waits for it", d.RunID, run.Status)}
		}
		background := run.Mode == store.RunBackground
		cfg, err := subAgent(d.Tools, background)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to run delegated run %q: %w", d.RunID, err)
		}
		ctx = delegate.WithRun(delegate.WithDepth(ctx, d.Depth), d.RunID)
		if background {
			// A sessions_spawn run's runTimeoutSeconds counts from its
			// start, across the pods that serve it; the pod answering it
			// records "timed out" (RunCompletion).
			if req, err := delegate.RequestOf(run); err == nil && req.Spawn != nil && req.Spawn.TimeoutSeconds > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, run.CreatedAt.Add(time.Duration(req.Spawn.TimeoutSeconds)*time.Second))
				// The pod exits after the run; its timer goes with the
				// deadline or the serving context, whichever ends first.
				context.AfterFunc(ctx, cancel)
			}
		}
		return ctx, session.NewManager(cfg), nil
	}
}
