package wake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/scheduler"
)

// RunChannel is the channel of scheduled runs' sessions.
const RunChannel = protocol.ChannelCron

// Run is a scheduled run carried by a wake: the pod that claims it runs it
// in a fresh session and publishes the result on RunResultChannel(tenant, RunID).
type Run struct {
	RunID         string    `json:"run_id"`
	Job           string    `json:"job"`
	JobName       string    `json:"job_name"`
	ScheduledTime time.Time `json:"scheduled_time"`
	Prompt        string    `json:"prompt"`
}

// RunResultChannel is the Pub/Sub channel of a run's result. It is the
// tenant's, so the pod publishing it needs only its tenant's channels.
func RunResultChannel(tenant, runID string) string { return bus.Key(tenant, "run-result", runID) }

// RunResult is a run's outcome on RunResultChannel.
type RunResult struct {
	Result scheduler.RunResult `json:"result"`
	Error  string              `json:"error,omitempty"`
}

// Runner is the operator's scheduler.Runner in cluster mode: it wakes a
// session pod of the run's agent with the run and waits for its result.
type Runner struct {
	Bus   bus.Bus
	Redis *redis.Client
	// Timeout bounds a run (30 minutes when zero); a run the pod does not
	// finish in time is failed.
	Timeout time.Duration
}

// Run implements scheduler.Runner.
func (r Runner) Run(ctx context.Context, req scheduler.RunRequest) (scheduler.RunResult, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ps := r.Redis.Subscribe(ctx, RunResultChannel(req.Tenant, req.RunID))
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(ctx); err != nil {
		return scheduler.RunResult{}, fmt.Errorf("failed to subscribe to the run's result: %w", err)
	}
	w := Wake{Tenant: req.Tenant, Agent: req.Agent, Channel: RunChannel, ChatKey: "run-" + req.RunID,
		Run: &Run{RunID: req.RunID, Job: req.Job, JobName: req.JobName, ScheduledTime: req.ScheduledTime, Prompt: req.Prompt}}
	if err := Publish(ctx, r.Bus, w); err != nil {
		return scheduler.RunResult{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m, ok := <-ps.Channel():
		if !ok {
			return scheduler.RunResult{}, errors.New("lost the run's result subscription")
		}
		var res RunResult
		if err := json.Unmarshal([]byte(m.Payload), &res); err != nil {
			return scheduler.RunResult{}, fmt.Errorf("malformed run result: %w", err)
		}
		if res.Error != "" {
			return res.Result, errors.New(res.Error)
		}
		return res.Result, nil
	case <-t.C:
		return scheduler.RunResult{}, fmt.Errorf("the session pod did not finish the run within %s", timeout)
	case <-ctx.Done():
		return scheduler.RunResult{}, ctx.Err()
	}
}

// RunNotices is the operator's scheduler.Deliverer in cluster mode: it queues
// a run's outcome for the gateway's dispatcher and waits for the result.
type RunNotices struct {
	Bus   bus.Bus
	Redis *redis.Client
	// Owner names the agent whose channel the notice goes to.
	Owner func(ctx context.Context, tenant, channel string) string
}

// Deliver implements scheduler.Deliverer.
func (n RunNotices) Deliver(ctx context.Context, no scheduler.Notice) error {
	req := OutboundRequest{ID: bus.NewID(), Tenant: no.Tenant, Wait: true, Message: OutboundMessage{
		Agent: n.Owner(ctx, no.Tenant, no.Channel), Target: no.Channel + ":" + no.ChatID, Text: no.Text, Origin: no.ID}}
	ps := n.Redis.Subscribe(ctx, ResultChannel(req.Tenant, req.ID))
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(ctx); err != nil {
		return fmt.Errorf("failed to subscribe to the delivery result: %w", err)
	}
	if err := QueueOutbound(ctx, n.Bus, req); err != nil {
		return err
	}
	t := time.NewTimer(3 * time.Minute)
	defer t.Stop()
	select {
	case m := <-ps.Channel():
		var res OutboundResult
		if err := json.Unmarshal([]byte(m.Payload), &res); err != nil {
			return fmt.Errorf("malformed delivery result: %w", err)
		}
		if res.Error != "" {
			return errors.New(res.Error)
		}
		return nil
	case <-t.C:
		return errors.New("no delivery result from the gateway within 3 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
}
