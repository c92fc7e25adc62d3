package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/tool"
)

type updateArgs struct {
	JobID           string       `json:"job_id"`
	Name            *string      `json:"name,omitempty"`
	Prompt          *string      `json:"prompt,omitempty"`
	Schedule        *scheduleArg `json:"schedule,omitempty"`
	Channel         *string      `json:"channel,omitempty"`
	ChatID          *string      `json:"chat_id,omitempty"`
	AgentID         *string      `json:"agent_id,omitempty" jsonschema:"agent that runs it; null returns it to Root"`
	DeliveryPolicy  *string      `json:"delivery_policy,omitempty"`
	MissedRunPolicy *string      `json:"missed_run_policy,omitempty"`
}

const updateDescription = "Change any fields of a job (same meaning as in cron_add); fields left out stay. agent_id null returns the job to Root."

// updateTool is cron_update. It needs to see `"agent_id": null`, which the
// generic argument decoding treats as absent, so it inspects the raw
// arguments before decoding them.
type updateTool struct {
	*tool.Func[updateArgs]
	t *tools
}

func newUpdateTool(t *tools) tool.Tool {
	return updateTool{t: t, Func: tool.New("cron_update", updateDescription, func(context.Context, tool.Env, updateArgs) (tool.Result, error) {
		return tool.Result{}, nil // replaced by updateTool.Run
	}, tool.Enum("delivery_policy", "always", "on_alert", "never"), tool.Enum("missed_run_policy", "skip", "run_once", "catch_up"), scheduleEnum)}
}

// Run implements tool.Tool.
func (u updateTool) Run(ctx context.Context, env tool.Env, raw json.RawMessage) (tool.Result, error) {
	a, err := u.Validate(raw)
	if err != nil {
		return tool.Result{}, &tool.ArgumentError{Tool: u.Name(), Err: err}
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	toRoot := false
	if v, ok := fields["agent_id"]; ok && strings.TrimSpace(string(v)) == "null" {
		toRoot = true
	}
	return u.t.update(ctx, env, a, toRoot)
}

func (t *tools) update(ctx context.Context, _ tool.Env, a updateArgs, toRoot bool) (tool.Result, error) {
	if err := checkID(a.JobID); err != nil {
		return toolErr(err), nil
	}
	if a.Name == nil && a.Prompt == nil && a.Schedule == nil && a.Channel == nil && a.ChatID == nil && a.AgentID == nil &&
		!toRoot && a.DeliveryPolicy == nil && a.MissedRunPolicy == nil {
		return tool.Errorf("error: nothing to change: give at least one field besides job_id"), nil
	}
	var sched picobotv1alpha1.Schedule
	if a.Schedule != nil {
		var err error
		if sched, err = a.Schedule.toSchedule(); err != nil {
			return toolErr(err), nil
		}
	}
	if a.Name != nil && utf8.RuneCountInString(strings.TrimSpace(*a.Name)) > maxNameLength {
		return tool.Errorf("error: name has more than %d characters", maxNameLength), nil
	}
	// The agent is checked before the read-modify-write, which must not
	// call out.
	var agentSpec picobotv1alpha1.CronJobSpec
	if a.AgentID != nil {
		if res, ok, err := t.setAgent(ctx, &agentSpec, *a.AgentID); !ok {
			return res, err
		}
	}
	j, err := t.b.update(ctx, a.JobID, func(j *job) error {
		return t.applyUpdate(j, a, toRoot, sched, agentSpec.AgentRef)
	})
	if err != nil {
		return t.fail(a.JobID, err)
	}
	return t.report(fmt.Sprintf("Updated job %q.", j.ID), j)
}

// applyUpdate makes a's changes to j and validates the result, without calling out.
func (t *tools) applyUpdate(j *job, a updateArgs, toRoot bool, sched picobotv1alpha1.Schedule, agentRef *corev1.LocalObjectReference) error {
	s := &j.Spec
	if a.Name != nil {
		j.Name = strings.TrimSpace(*a.Name)
	}
	if a.Prompt != nil {
		s.Prompt = *a.Prompt
	}
	if a.Schedule != nil {
		s.Schedule = sched
	}
	if a.Channel != nil || a.ChatID != nil {
		if err := retarget(s, a.Channel, a.ChatID); err != nil {
			return err
		}
	}
	switch {
	case toRoot:
		s.AgentRef = nil
	case a.AgentID != nil:
		s.AgentRef = agentRef
	}
	if a.DeliveryPolicy != nil {
		s.DeliveryPolicy = picobotv1alpha1.DeliveryPolicy(*a.DeliveryPolicy)
	}
	if a.MissedRunPolicy != nil {
		s.MissedRunPolicy = picobotv1alpha1.MissedRunPolicy(*a.MissedRunPolicy)
		if s.MissedRunPolicy != picobotv1alpha1.MissedCatchUp {
			s.CatchUpWindow = nil
		}
	}
	retargeted := a.Channel != nil || a.ChatID != nil || a.DeliveryPolicy != nil
	if retargeted && s.Target == nil && s.DeliveryPolicy != picobotv1alpha1.DeliveryNever {
		return &invalidError{msg: "the job has no target to deliver to: give channel and chat_id, or delivery_policy never"}
	}
	// A one-shot job must lie in the future when it gets a new
	// schedule or stays enabled.
	future := a.Schedule != nil || (s.Schedule.At != nil && j.enabled())
	if err := scheduler.ValidateSpec(*s, t.now(), future); err != nil {
		return &invalidError{msg: err.Error()}
	}
	return nil
}

// retarget sets s's delivery target, keeping the stored channel or chat_id where one is nil.
func retarget(s *picobotv1alpha1.CronJobSpec, channelArg, chatArg *string) error {
	var channel, chat string
	if s.Target != nil {
		channel, chat = s.Target.Channel, s.Target.ChatID
	}
	if channelArg != nil {
		channel = strings.TrimSpace(*channelArg)
	}
	if chatArg != nil {
		chat = strings.TrimSpace(*chatArg)
	}
	switch {
	case channel == "" && chat == "":
		s.Target = nil
	case channel == "" || chat == "":
		return &invalidError{msg: "the job needs both a channel and a chat_id (or neither, with delivery_policy never)"}
	default:
		s.Target = &picobotv1alpha1.DeliveryTarget{Channel: channel, ChatID: chat}
	}
	return nil
}
