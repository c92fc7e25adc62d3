package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/schedule"
)

// Limits of a job spec, the same as the CronJob CRD's.
const (
	MaxPromptLength  = 32768
	MaxEvery         = 31622400000 // ms, 366 days
	MaxCronLength    = 256
	MaxTZLength      = 64
	MaxChannelLength = 63
	MaxChatIDLength  = 256
)

// ValidateSpec checks a job spec the way the API server (CEL, schema) and
// the scheduler would, with messages a model or a person can act on, so the
// cron tools refuse bad input in both modes before anything is stored. When
// future is set, an `at` schedule must lie after now (creating, updating or
// enabling a one-shot job).
func ValidateSpec(spec picobotv1alpha1.CronJobSpec, now time.Time, future bool) error {
	if err := validateSchedule(spec.Schedule, now, future); err != nil {
		return err
	}
	switch n := utf8.RuneCountInString(spec.Prompt); {
	case strings.TrimSpace(spec.Prompt) == "":
		return errors.New("prompt is empty: give the full instructions for the run (it starts without chat history)")
	case n > MaxPromptLength:
		return fmt.Errorf("prompt has %d characters; the limit is %d", n, MaxPromptLength)
	}
	if t := spec.Target; t != nil {
		if t.Channel == "" || utf8.RuneCountInString(t.Channel) > MaxChannelLength {
			return fmt.Errorf("channel %q must have 1 to %d characters", t.Channel, MaxChannelLength)
		}
		if t.ChatID == "" || utf8.RuneCountInString(t.ChatID) > MaxChatIDLength {
			return fmt.Errorf("chat_id must have 1 to %d characters", MaxChatIDLength)
		}
	}
	if r := spec.AgentRef; r != nil && (r.Name == "" || len(r.Name) > 253) {
		return fmt.Errorf("agent %q is not a valid agent name", r.Name)
	}
	switch spec.DeliveryPolicy {
	case "", picobotv1alpha1.DeliveryAlways, picobotv1alpha1.DeliveryOnAlert, picobotv1alpha1.DeliveryNever:
	default:
		return fmt.Errorf("delivery_policy %q is unknown; use always, on_alert or never", spec.DeliveryPolicy)
	}
	switch spec.MissedRunPolicy {
	case "", picobotv1alpha1.MissedSkip, picobotv1alpha1.MissedRunOnce, picobotv1alpha1.MissedCatchUp:
	default:
		return fmt.Errorf("missed_run_policy %q is unknown; use skip, run_once or catch_up", spec.MissedRunPolicy)
	}
	if spec.CatchUpWindow != nil && spec.MissedRunPolicy != picobotv1alpha1.MissedCatchUp {
		return errors.New("a catch-up window applies only with missed_run_policy catch_up")
	}
	if spec.CatchUpWindow != nil && spec.CatchUpWindow.Duration <= 0 {
		return errors.New("the catch-up window must be positive")
	}
	return nil
}

func validateSchedule(s picobotv1alpha1.Schedule, now time.Time, future bool) error {
	if len(s.Cron) > MaxCronLength {
		return fmt.Errorf("cron expression is longer than %d characters", MaxCronLength)
	}
	if len(s.TZ) > MaxTZLength {
		return fmt.Errorf("tz is longer than %d characters", MaxTZLength)
	}
	if s.At != nil && *s.At < 0 {
		return errors.New("at must be a Unix time in milliseconds, not negative")
	}
	if s.Every != nil && *s.Every > MaxEvery {
		return fmt.Errorf("every_ms %d is more than %d (366 days)", *s.Every, int64(MaxEvery))
	}
	sched, err := schedule.Parse(s, now)
	if err != nil {
		return err
	}
	if s.At != nil && future && sched.Next(now).IsZero() {
		at := time.UnixMilli(*s.At).UTC()
		msg := fmt.Sprintf("at %d (%s) is in the past (now is %s); a one-shot schedule needs a future Unix time in milliseconds",
			*s.At, at.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		if *s.At < 100_000_000_000 {
			msg += "; the value looks like seconds: multiply by 1000"
		}
		return errors.New(msg)
	}
	return nil
}

// MaintenanceJobName names the daily routine-maintenance job the scheduler
// creates in every tenant.
const MaintenanceJobName = "routine-maintenance"

// MaintenanceCron is when routine maintenance runs: 03:30 every day.
const MaintenanceCron = "0 30 3 * * *"

// MaintenanceSpec is the daily routine-maintenance job: the Root agent
// cleans up timeline memories past their retention with routine_maintenance.
// It is created once, idempotently (CreateIfMissing semantics in both
// modes), so a user who disabled or changed it keeps their version across
// restarts. tz is its time zone ("" for UTC).
func MaintenanceSpec(tz string) picobotv1alpha1.CronJobSpec {
	return picobotv1alpha1.CronJobSpec{
		Schedule: picobotv1alpha1.Schedule{Cron: MaintenanceCron, TZ: tz},
		Prompt: "Daily routine maintenance. Call the routine_maintenance tool to clean up timeline memories older than " +
			"the retention period (knowledge memories are never deleted). Then call complete_scheduled_run: outcome ok " +
			"with a one-line summary of what was cleaned up, alert if something needs the user's attention, or failed " +
			"if the tool failed or is not available to you.",
		DeliveryPolicy:  picobotv1alpha1.DeliveryOnAlert,
		MissedRunPolicy: picobotv1alpha1.MissedRunOnce,
	}
}
