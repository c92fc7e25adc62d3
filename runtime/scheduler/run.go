package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
)

// writeTimeout bounds one store write recording a run's end (retries
// included); these writes run on a context that outlives the scheduler's,
// so a stopping scheduler still records what its runs did.
const writeTimeout = 30 * time.Second

// Messages recorded on runs that did not end normally.
const (
	msgInterrupted   = "Interrupted: the scheduler stopped before the run finished"
	msgNoOutcome     = "The runner reported no outcome; a run must end with complete_scheduled_run (ok, alert, failed or refused)"
	msgNoDeliverer   = "no deliverer is configured in this scheduler"
	msgNoTarget      = "the job has no target channel and chat"
	msgJobGone       = "the job no longer exists"
	msgChanged       = "The job was disabled, removed or rescheduled between claiming this tick and its time"
	maxMessageLength = 8000
)

// deliveryStale is how long a pending delivery of a gone scheduler waits
// before the sweep delivers it again.
const deliveryStale = 3 * time.Minute

// execute runs one claimed tick and records how it ended.
func (s *Scheduler) execute(ctx context.Context, j *Job, c store.CronClaim) {
	if wait := c.Run.ScheduledTime.Sub(s.clock.Now()); wait > 0 { // claimed ahead
		select {
		case <-s.clock.After(wait):
		case <-ctx.Done():
			s.finish(ctx, j, c.Run.RunID, c.Detail, RunResult{Outcome: store.OutcomeFailed, Message: msgInterrupted})
			return
		}
		cur := s.currentFor(j, c.Run.ScheduledTime)
		if cur == nil {
			s.finish(ctx, j, c.Run.RunID, c.Detail, RunResult{Outcome: store.OutcomeSkipped, Message: msgChanged})
			return
		}
		j = cur
	}
	if ctx.Err() != nil { // claimed while stopping
		s.finish(ctx, j, c.Run.RunID, c.Detail, RunResult{Outcome: store.OutcomeFailed, Message: msgInterrupted})
		return
	}
	if s.runSlots != nil {
		select {
		case s.runSlots <- struct{}{}:
			defer func() { <-s.runSlots }()
		case <-ctx.Done():
			s.finish(ctx, j, c.Run.RunID, c.Detail, RunResult{Outcome: store.OutcomeFailed, Message: msgInterrupted})
			return
		}
	}
	rctx, cancel := context.WithTimeout(store.WithTenant(ctx, j.Tenant), s.opts.RunTimeout)
	defer cancel()
	// A fire is a trace of its own: no request asked for it. The run's turn
	// (queued on the bus in cluster mode) continues it; a job a turn made
	// links back to that turn's tool call.
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(tracing.AttrTenant.String(j.Tenant),
		tracing.AttrCronJob.String(j.Name), tracing.AttrRunID.String(c.Run.RunID))}
	if link, ok := tracing.LinkTo(j.Origin); ok {
		opts = append(opts, trace.WithLinks(link))
	}
	rctx, span := s.tracer.Start(rctx, tracing.SpanCronFire, opts...)
	defer span.End()
	res, err := s.run(rctx, j, c)
	switch {
	case err != nil && ctx.Err() != nil:
		res = RunResult{Outcome: store.OutcomeFailed, Message: msgInterrupted, SessionID: res.SessionID}
	case err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded):
		res = RunResult{Outcome: store.OutcomeFailed, SessionID: res.SessionID,
			Message: fmt.Sprintf("The run did not finish within %s", s.opts.RunTimeout)}
	case err != nil:
		res = RunResult{Outcome: store.OutcomeFailed, Message: err.Error(), SessionID: res.SessionID}
	}
	switch res.Outcome {
	case store.OutcomeOK, store.OutcomeAlert, store.OutcomeFailed, store.OutcomeRefused:
	default:
		res = RunResult{Outcome: store.OutcomeFailed, Message: msgNoOutcome, SessionID: res.SessionID}
	}
	span.SetAttributes(tracing.AttrOutcome.String(string(res.Outcome)))
	if res.Outcome == store.OutcomeFailed {
		span.SetStatus(codes.Error, "the run failed")
	}
	s.finish(ctx, j, c.Run.RunID, c.Detail, res)
}

// run resolves the run's agent (the tenant's root agent for a job naming
// none) and has the Runner execute it.
func (s *Scheduler) run(ctx context.Context, j *Job, c store.CronClaim) (RunResult, error) {
	agent := j.Agent()
	if (j.Spec.AgentRef == nil || j.Spec.AgentRef.Name == "") && s.opts.RootAgent != nil {
		root, err := s.opts.RootAgent(ctx, j.Tenant)
		if err != nil {
			return RunResult{}, fmt.Errorf("the job names no agent, so it runs on the root agent of tenant %q: %w", j.Tenant, err)
		}
		agent = root
	}
	return s.opts.Runner.Run(ctx, RunRequest{Tenant: j.Tenant, Job: j.Key(), JobName: j.title(), RunID: c.Run.RunID,
		ScheduledTime: c.Run.ScheduledTime, Agent: agent, Prompt: j.Spec.Prompt})
}

// deliverable says whether the policy delivers an outcome and, when it
// cannot be delivered for want of a target, why.
func deliverable(j *Job, outcome store.CronOutcome) (deliver bool, why string) {
	switch j.Spec.DeliveryPolicy {
	case picobotv1alpha1.DeliveryNever:
		return false, ""
	case picobotv1alpha1.DeliveryOnAlert:
		if outcome == store.OutcomeOK || outcome == store.OutcomeSkipped {
			return false, ""
		}
	default: // always
		if outcome == store.OutcomeSkipped {
			return false, ""
		}
	}
	if t := j.Spec.Target; t == nil || t.Channel == "" || t.ChatID == "" {
		return false, msgNoTarget
	}
	return true, ""
}

// finish records a run's outcome and delivers it by the job's policy. The
// scheduler stopping (ctx ended) leaves a due delivery pending for the next
// scheduler's sweep.
func (s *Scheduler) finish(ctx context.Context, j *Job, runID string, detail store.CronRunDetail, res RunResult) {
	wctx := store.WithTenant(context.WithoutCancel(ctx), j.Tenant)
	if len(res.Message) > maxMessageLength {
		res.Message = res.Message[:maxMessageLength] + "…"
	}
	res.Message = strings.ToValidUTF8(strings.ReplaceAll(res.Message, "\x00", ""), "")
	deliver, why := deliverable(j, res.Outcome)
	if !deliver {
		s.record(wctx, j, runID, store.CronRunUpdate{State: ptr(store.CronDone), Outcome: &res.Outcome, Message: &res.Message,
			FinishedAt: ptr(s.clock.Now()), Delivery: ptr(store.CronDeliverySuppressed)},
			store.CronRunDetailUpdate{SessionID: nonEmpty(res.SessionID), DeliveryError: nonEmpty(why)})
		return
	}
	// The outcome is recorded (delivery pending) before delivering: a crash
	// in between leaves the delivery to the next sweep.
	if !s.record(wctx, j, runID, store.CronRunUpdate{State: ptr(store.CronDone), Outcome: &res.Outcome, Message: &res.Message,
		FinishedAt: ptr(s.clock.Now()), Delivery: ptr(store.CronDeliveryPending)},
		store.CronRunDetailUpdate{SessionID: nonEmpty(res.SessionID)}) {
		return
	}
	if ctx.Err() != nil {
		return
	}
	s.deliver(ctx, wctx, j, runID, detail, res.Outcome, res.Message)
}

// deliver sends one outcome and records the result.
func (s *Scheduler) deliver(ctx, wctx context.Context, j *Job, runID string, detail store.CronRunDetail, outcome store.CronOutcome, message string) {
	var err error
	if s.opts.Deliverer == nil {
		err = errors.New(msgNoDeliverer)
	} else {
		n := Notice{ID: "cron:" + runID, Tenant: j.Tenant, Job: j.Key(), RunID: runID, Channel: detail.Channel,
			ChatID: detail.ChatID, Outcome: outcome, Text: noticeText(j, outcome, message)}
		err = s.opts.Deliverer.Deliver(store.WithTenant(ctx, j.Tenant), n)
		if err != nil && ctx.Err() != nil {
			return // stopping: the next sweep delivers it
		}
	}
	u := store.CronRunUpdate{Delivery: ptr(store.CronDeliveryDelivered)}
	var d store.CronRunDetailUpdate
	if err != nil {
		u.Delivery = ptr(store.CronDeliveryFailed)
		d.DeliveryError = ptr(strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", ""), ""))
	}
	s.record(wctx, j, runID, u, d)
}

// noticeText is what the target chat reads.
func noticeText(j *Job, outcome store.CronOutcome, message string) string {
	if message == "" {
		message = "(no message)"
	}
	return fmt.Sprintf("%s (%s): %s", j.title(), outcome, message)
}

// record writes a run's update and reports the finished record to
// OnRunDone; false when the write failed (logged). ctx must outlive the
// scheduler's (context.WithoutCancel): a stopping scheduler still records.
func (s *Scheduler) record(ctx context.Context, j *Job, runID string, u store.CronRunUpdate, d store.CronRunDetailUpdate) bool {
	var out store.DetailedCronRun
	s.recordSlots <- struct{}{}
	defer func() { <-s.recordSlots }()
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	err := s.retry(ctx, "record run", func() error {
		var err error
		out, err = s.opts.Store.UpdateCronRunDetail(ctx, runID, u, d)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
			return nil // not retryable; reported below
		}
		return err
	})
	if err == nil && out.RunID == "" {
		err = fmt.Errorf("run record %q is gone", runID)
	}
	if err != nil {
		s.log.Error("Failed to record scheduled run", "job", j.Key(), "run", runID, "err", err)
		return false
	}
	if out.State == store.CronDone && out.Delivery != store.CronDeliveryPending {
		s.done(*j, out)
	}
	return true
}

func ptr[T any](v T) *T { return &v }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// sweepLoop finishes what dead schedulers left behind, at start and every
// SweepInterval.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(s.opts.SweepInterval):
		}
	}
}

// sweep looks at unfinished run records of every known tenant: a run
// unfinished for StaleAfter, not ours, was interrupted (its scheduler is
// gone) and is recorded as failed; an outcome whose delivery stayed pending
// that long is delivered again with the same notice id.
func (s *Scheduler) sweep(ctx context.Context) {
	s.mu.Lock()
	tenants := make([]string, 0, len(s.tenants))
	for t := range s.tenants {
		tenants = append(tenants, t)
	}
	s.mu.Unlock()
	now := s.clock.Now()
	for _, tenant := range tenants {
		tctx := store.WithTenant(ctx, tenant)
		open, err := s.opts.Store.ListUnfinishedCronRuns(tctx, "", 1000)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Failed to list unfinished scheduled runs", "tenant", tenant, "err", err)
			}
			continue
		}
		for _, r := range open {
			if ctx.Err() != nil {
				return
			}
			since, stale := r.ScheduledTime, s.opts.StaleAfter
			switch {
			case r.Outcome != "" && r.FinishedAt != nil:
				// Only the delivery is left; a deliverer gives up within
				// its own cap (the outbound dispatcher's is 120 s).
				since, stale = *r.FinishedAt, min(stale, deliveryStale)
			case r.StartedAt != nil:
				since = *r.StartedAt
			}
			if s.tracked(r.RunID) || now.Sub(since) < stale {
				continue
			}
			s.resume(ctx, tenant, r)
		}
	}
}

// resume finishes one record a gone scheduler left behind.
func (s *Scheduler) resume(ctx context.Context, tenant string, r store.DetailedCronRun) {
	s.mu.Lock()
	var j *Job
	if e := s.entries[r.Job]; e != nil {
		j = e.job
	}
	s.mu.Unlock()
	if j == nil {
		// The job is gone (or not yet seen): finish the record without
		// delivering.
		_, name, _ := strings.Cut(r.Job, "/")
		j = &Job{Tenant: tenant, Name: name, Spec: picobotv1alpha1.CronJobSpec{DeliveryPolicy: picobotv1alpha1.DeliveryNever}}
		if r.Delivery == store.CronDeliveryPending {
			s.record(store.WithTenant(context.WithoutCancel(ctx), tenant), j, r.RunID, store.CronRunUpdate{State: ptr(store.CronDone),
				Delivery: ptr(store.CronDeliveryFailed)}, store.CronRunDetailUpdate{DeliveryError: ptr(msgJobGone)})
			return
		}
	}
	s.track(r.RunID)
	defer s.untrack(r.RunID)
	if r.Outcome == "" {
		s.log.Info("Finishing a scheduled run a stopped scheduler left behind", "job", r.Job, "run", r.RunID)
		s.finish(ctx, j, r.RunID, r.Detail, RunResult{Outcome: store.OutcomeFailed, Message: msgInterrupted})
		return
	}
	wctx := store.WithTenant(context.WithoutCancel(ctx), tenant)
	if r.State != store.CronDone {
		if !s.record(wctx, j, r.RunID, store.CronRunUpdate{State: ptr(store.CronDone)}, store.CronRunDetailUpdate{}) {
			return
		}
	}
	if r.Delivery == store.CronDeliveryPending {
		s.log.Info("Delivering a scheduled run's outcome left pending", "job", r.Job, "run", r.RunID)
		s.deliver(ctx, wctx, j, r.RunID, r.Detail, r.Outcome, r.Message)
	}
}

// recoverLoop handles the ticks of newly seen jobs since their last
// recorded run: late ones run, missed ones follow the missed-run policy.
func (s *Scheduler) recoverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.recWake:
		}
		s.mu.Lock()
		pending := s.recovery
		s.recovery = map[string]time.Time{}
		s.mu.Unlock()
		if len(pending) == 0 {
			continue
		}
		byTenant := map[string][]string{}
		for key := range pending {
			tenant, _, _ := strings.Cut(key, "/")
			byTenant[tenant] = append(byTenant[tenant], key)
		}
		var acts []action
		for tenant, keys := range byTenant {
			for len(keys) > 0 {
				n := min(len(keys), 1000)
				chunk := keys[:n]
				keys = keys[n:]
				// Each job's last tick is looked up as of its first sight:
				// the fire loop has been claiming the ticks after it (ahead,
				// even) meanwhile, and those would hide a gap before them.
				bounds := make(map[string]time.Time, len(chunk))
				for _, key := range chunk {
					bounds[key] = pending[key]
				}
				var last map[string]time.Time
				err := s.retry(ctx, "read last runs", func() error {
					var err error
					last, err = s.opts.Store.LastCronRunTimes(store.WithTenant(ctx, tenant), bounds)
					return err
				})
				if err != nil {
					return // ctx ended
				}
				acts = append(acts, s.recoverJobs(chunk, pending, last)...)
			}
		}
		if len(acts) > 0 && !s.dispatch(ctx, acts) {
			return
		}
	}
}

// recoverJobs plans the ticks of keys between their last recorded run (or
// creation, or NotBefore) and the moment they were first seen.
func (s *Scheduler) recoverJobs(keys []string, until, last map[string]time.Time) []action {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	p := s.planParams(now)
	var acts []action
	for _, key := range keys {
		e := s.entries[key]
		if e == nil || e.job.suspended() {
			continue
		}
		from := last[key]
		if from.IsZero() {
			from = e.job.Created
		}
		if e.job.NotBefore.After(from) {
			from = e.job.NotBefore
		}
		if from.IsZero() {
			continue
		}
		acts = append(acts, plan(e.job, collectTicks(e.sched, from, until[key], s.opts.MaxMissedRecords), p)...)
	}
	return acts
}
