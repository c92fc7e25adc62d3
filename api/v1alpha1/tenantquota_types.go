package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantQuotaName is the name of the one TenantQuota a namespace (a tenant)
// has: a namespace holds at most one quota, so there is never a question of
// which of two applies. The API server refuses any other name.
const TenantQuotaName = "default"

// ModelBudget caps the tenant's model use per UTC day and per calendar
// month (UTC), over all its Agents. An unset cap is no cap. Costs are in the
// currency of the price table (pricesConfigMap, else the built-in list
// prices in USD), as a decimal such as "12.50" (at most 6 decimals).
type ModelBudget struct {
	// dayTokens caps input plus output tokens per UTC day.
	// +optional
	// +kubebuilder:validation:Minimum=1
	DayTokens *int64 `json:"dayTokens,omitempty"`

	// monthTokens caps input plus output tokens per calendar month.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MonthTokens *int64 `json:"monthTokens,omitempty"`

	// dayCost caps the cost of the model calls per UTC day ("12.50").
	// +optional
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,12}([.][0-9]{1,6})?$') && self.matches('[1-9]')",message="dayCost must be a positive decimal such as 12.50 (at most 6 decimals)"
	DayCost *string `json:"dayCost,omitempty"`

	// monthCost caps the cost of the model calls per calendar month ("300").
	// +optional
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,12}([.][0-9]{1,6})?$') && self.matches('[1-9]')",message="monthCost must be a positive decimal such as 300 or 12.50 (at most 6 decimals)"
	MonthCost *string `json:"monthCost,omitempty"`

	// softLimitPercent of any cap at which the runtime warns once (a log
	// line and a notice to the turn's client) before the cap refuses calls.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SoftLimitPercent *int32 `json:"softLimitPercent,omitempty"`
}

// TenantQuotaSpec is what the platform team allows one tenant (namespace).
// docs/quotas.md says which part of the platform enforces each field.
type TenantQuotaSpec struct {
	// budget caps the tenant's model tokens and cost; the session runtime
	// checks it before every model call and stops the turn with
	// budget_exhausted once a cap is reached.
	// +optional
	Budget *ModelBudget `json:"budget,omitempty"`

	// pricesConfigMap names a ConfigMap in the same namespace whose key
	// "prices" is a price table (one "provider/model: input output
	// [cachedInput]" line per model, per million tokens). Its models replace
	// or add to the built-in list prices.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	PricesConfigMap *string `json:"pricesConfigMap,omitempty"`

	// maxConcurrentSessions caps the tenant's open chats (a chat with a
	// message in the last 10 minutes): the gateway refuses a new chat's
	// message beyond it with session_limit, across its replicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxConcurrentSessions *int32 `json:"maxConcurrentSessions,omitempty"`

	// maxSessionPods caps the tenant's session pods (warm ones included):
	// the operator creates none beyond it (the Agent's WithinQuota
	// condition and an Event say so).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxSessionPods *int32 `json:"maxSessionPods,omitempty"`

	// maxWarmPods caps the tenant's warm (unclaimed) session pods: the
	// Agents' warm pools are filled, by name, up to it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxWarmPods *int32 `json:"maxWarmPods,omitempty"`

	// maxBrowserPods caps the tenant's browser pods: a browser beyond it is
	// not started (its BrowserProfile's Ready condition says so with reason
	// BrowserPodLimit, and the session asking for it is told).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxBrowserPods *int32 `json:"maxBrowserPods,omitempty"`

	// maxCronJobs caps the tenant's CronJobs (the operator's own
	// routine-maintenance job does not count): those past it, in creation
	// order, are not scheduled (their WithinQuota condition says so).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxCronJobs *int32 `json:"maxCronJobs,omitempty"`

	// messagesPerMinute caps the inbound messages of the tenant's sessions
	// over a sliding minute: the gateway refuses the rest with
	// message_limit, across its replicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MessagesPerMinute *int32 `json:"messagesPerMinute,omitempty"`
}

// UsageStatus is model usage as the store records it: tokens (input plus
// output) and cost (in the price table's currency, a decimal such as
// "0.012345") of the UTC day and the calendar month so far.
type UsageStatus struct {
	// day is the UTC day of dayTokens and dayCost (2006-01-02).
	// +optional
	// +kubebuilder:validation:MaxLength=10
	Day string `json:"day,omitempty"`
	// dayTokens are the input plus output tokens of day.
	// +optional
	DayTokens int64 `json:"dayTokens,omitempty"`
	// dayCost is the cost of day's model calls.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	DayCost string `json:"dayCost,omitempty"`
	// monthTokens are the input plus output tokens of day's month so far.
	// +optional
	MonthTokens int64 `json:"monthTokens,omitempty"`
	// monthCost is the cost of the month's model calls so far.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	MonthCost string `json:"monthCost,omitempty"`
}

// TenantQuotaStatus is what the tenant uses of its quota, as the operator
// counts it.
type TenantQuotaStatus struct {
	// conditions of the quota.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// sessionPods are the namespace's session pods that are not finished
	// (warm and starting ones included).
	// +optional
	SessionPods *int32 `json:"sessionPods,omitempty"`

	// warmPods are the session pods not serving a chat (idle or starting).
	// +optional
	WarmPods *int32 `json:"warmPods,omitempty"`

	// browserPods are the namespace's browser pods that are not finished.
	// +optional
	BrowserPods *int32 `json:"browserPods,omitempty"`

	// cronJobs counts the namespace's CronJobs, the operator's own
	// routine-maintenance job excepted (it does not count toward
	// maxCronJobs).
	// +optional
	CronJobs *int32 `json:"cronJobs,omitempty"`

	// usage is the tenant's model usage today and this month; set when the
	// operator reads the store (its --postgres-url).
	// +optional
	Usage *UsageStatus `json:"usage,omitempty"`
}

// TenantQuota is what the platform team allows the tenant of its namespace:
// model budgets in tokens and money and caps on sessions, pods and
// messages. Tenants may read it, not write it. A namespace has at most one,
// named "default".
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tq,categories=picobot
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="a TenantQuota must be named default: a namespace has one quota"
// +kubebuilder:printcolumn:name="Day Tokens",type=integer,JSONPath=`.spec.budget.dayTokens`
// +kubebuilder:printcolumn:name="Month Tokens",type=integer,JSONPath=`.spec.budget.monthTokens`
// +kubebuilder:printcolumn:name="Day Cost",type=string,JSONPath=`.spec.budget.dayCost`
// +kubebuilder:printcolumn:name="Month Cost",type=string,JSONPath=`.spec.budget.monthCost`
// +kubebuilder:printcolumn:name="Today Tokens",type=integer,JSONPath=`.status.usage.dayTokens`
// +kubebuilder:printcolumn:name="Today Cost",type=string,JSONPath=`.status.usage.dayCost`
// +kubebuilder:printcolumn:name="Session Pods",type=integer,JSONPath=`.status.sessionPods`
// +kubebuilder:printcolumn:name="Browser Pods",type=integer,JSONPath=`.status.browserPods`,priority=1
// +kubebuilder:printcolumn:name="CronJobs",type=integer,JSONPath=`.status.cronJobs`,priority=1
// +kubebuilder:printcolumn:name="Prices",type=string,JSONPath=`.spec.pricesConfigMap`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TenantQuota struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the platform team allows.
	// +optional
	Spec TenantQuotaSpec `json:"spec,omitempty"`

	// status is written by the operator.
	// +optional
	Status TenantQuotaStatus `json:"status,omitempty"`
}

// TenantQuotaList is a list of TenantQuotas.
// +kubebuilder:object:root=true
type TenantQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantQuota `json:"items"`
}
