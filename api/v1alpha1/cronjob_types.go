package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Schedule says when a CronJob fires: exactly one of at, every or cron.
// +kubebuilder:validation:XValidation:rule="[has(self.at), has(self.every), has(self.cron)].filter(x, x).size() == 1",message="schedule needs exactly one of at, every or cron"
// +kubebuilder:validation:XValidation:rule="!has(self.tz) || has(self.cron)",message="tz applies only to a cron schedule"
type Schedule struct {
	// at fires once at this Unix time in milliseconds. A time in the past is
	// refused (condition ScheduleValid=False, reason AtInPast).
	// +optional
	// +kubebuilder:validation:Minimum=0
	At *int64 `json:"at,omitempty"`

	// every fires repeatedly at this interval in milliseconds, counted from the
	// CronJob's creation. The floor is 60000 (one minute).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 60000",message="every must be at least 60000 ms (one minute)"
	// +kubebuilder:validation:Maximum=31622400000
	Every *int64 `json:"every,omitempty"`

	// cron is a 6-field expression: second minute hour day-of-month month
	// day-of-week, e.g. "0 0 9 * * MON-FRI" for 09:00 on weekdays.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^\\\\s*\\\\S+(\\\\s+\\\\S+){5}\\\\s*$')",message="cron must have exactly 6 fields: second minute hour day-of-month month day-of-week (e.g. \"0 0 9 * * *\")"
	Cron string `json:"cron,omitempty"`

	// tz is the IANA time zone of a cron schedule, e.g. "Asia/Shanghai"; UTC when
	// omitted.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TZ string `json:"tz,omitempty"`
}

// DeliveryPolicy decides which run outcomes are delivered to the target.
// +kubebuilder:validation:Enum=always;on_alert;never
type DeliveryPolicy string

const (
	// DeliveryAlways delivers every outcome.
	DeliveryAlways DeliveryPolicy = "always"
	// DeliveryOnAlert suppresses only "ok" outcomes.
	DeliveryOnAlert DeliveryPolicy = "on_alert"
	// DeliveryNever only records the run.
	DeliveryNever DeliveryPolicy = "never"
)

// MissedRunPolicy decides what happens to ticks missed while the scheduler was
// down. Missed ticks are recorded whatever the policy.
// +kubebuilder:validation:Enum=skip;run_once;catch_up
type MissedRunPolicy string

const (
	// MissedSkip records missed ticks as skipped and waits for the next one.
	MissedSkip MissedRunPolicy = "skip"
	// MissedRunOnce runs once for all missed ticks.
	MissedRunOnce MissedRunPolicy = "run_once"
	// MissedCatchUp runs every missed tick inside catchUpWindow.
	MissedCatchUp MissedRunPolicy = "catch_up"
)

// DeliveryTarget is where results are delivered.
type DeliveryTarget struct {
	// channel is the channel name (e.g. "telegram", "web").
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Channel string `json:"channel"`

	// chatID is the chat within the channel.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ChatID string `json:"chatID"`
}

// CronJobSpec is a prompt run on a schedule by an agent.
// +kubebuilder:validation:XValidation:rule="!has(self.catchUpWindow) || self.missedRunPolicy == 'catch_up'",message="catchUpWindow applies only with missedRunPolicy catch_up"
type CronJobSpec struct {
	// schedule says when to fire.
	// +required
	Schedule Schedule `json:"schedule"`

	// prompt is sent to a fresh session without chat history, so it must carry
	// its own context. The run ends by calling complete_scheduled_run.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	Prompt string `json:"prompt"`

	// agentRef names the Agent (same namespace) that runs the prompt; the
	// namespace's root agent when omitted.
	// +optional
	AgentRef *corev1.LocalObjectReference `json:"agentRef,omitempty"`

	// target is where outcomes are delivered.
	// +optional
	Target *DeliveryTarget `json:"target,omitempty"`

	// deliveryPolicy: "always" delivers every outcome, "on_alert" suppresses
	// "ok" outcomes, "never" only records.
	// +optional
	// +kubebuilder:default=always
	DeliveryPolicy DeliveryPolicy `json:"deliveryPolicy,omitempty"`

	// suspend stops future runs without deleting the job.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// missedRunPolicy handles ticks missed while the scheduler was down: "skip",
	// "run_once" (default) or "catch_up" (each missed tick within catchUpWindow).
	// +optional
	// +kubebuilder:default=run_once
	MissedRunPolicy MissedRunPolicy `json:"missedRunPolicy,omitempty"`

	// catchUpWindow bounds how far back catch_up reaches.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="catchUpWindow must be a duration such as 1h or 168h, from 1s to 8760h"
	CatchUpWindow *Duration `json:"catchUpWindow,omitempty"`
}

// RunOutcome is how a scheduled run ended.
// +kubebuilder:validation:Enum=ok;alert;failed;refused;skipped
type RunOutcome string

// CronRun is the record of one run.
type CronRun struct {
	// id of the run record.
	// +required
	ID string `json:"id"`
	// scheduledTime is the tick the run belongs to.
	// +required
	ScheduledTime metav1.Time `json:"scheduledTime"`
	// startTime is when the run started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the run ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// outcome of the run.
	// +optional
	Outcome RunOutcome `json:"outcome,omitempty"`
}

// CronJobStatus is what the operator observed about the job.
type CronJobStatus struct {
	// conditions: Ready (summary), ScheduleValid, ReferencesResolved.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation this status describes; 0
	// until the operator has looked at the object, so that kstatus (Flux,
	// cli-utils) reads a new object as InProgress, not Current.
	// +kubebuilder:default=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// nextRunTime is when the job fires next; empty when suspended or done.
	// +optional
	NextRunTime *metav1.Time `json:"nextRunTime,omitempty"`

	// lastRun is the most recent run.
	// +optional
	LastRun *CronRun `json:"lastRun,omitempty"`
}

// CronJob runs a prompt with an agent on a schedule (at / every / 6-field cron
// with time zone) and delivers the outcome by policy. Not to be confused with
// batch/v1 CronJob: use `kubectl get cronjobs.agents.picobot.io` or `pcj`.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pcj,categories=picobot
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Cron",type=string,JSONPath=`.spec.schedule.cron`
// +kubebuilder:printcolumn:name="Every",type=integer,JSONPath=`.spec.schedule.every`,priority=1
// +kubebuilder:printcolumn:name="Next Run",type=string,JSONPath=`.status.nextRunTime`
// +kubebuilder:printcolumn:name="Last Outcome",type=string,JSONPath=`.status.lastRun.outcome`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CronJob struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the schedule and the prompt.
	// +required
	Spec CronJobSpec `json:"spec"`

	// status is written by the operator. It defaults to an empty status
	// (observedGeneration 0) until then.
	// +kubebuilder:default={}
	// +optional
	Status CronJobStatus `json:"status,omitempty"`
}

// CronJobList is a list of CronJobs.
// +kubebuilder:object:root=true
type CronJobList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CronJob `json:"items"`
}
