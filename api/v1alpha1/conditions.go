package v1alpha1

// Condition types shared by the PicoBot kinds. Every kind has Ready, the summary
// that printer columns and `kubectl wait --for=condition=Ready` use.
const (
	// ConditionReady summarises all other conditions of the object.
	ConditionReady = "Ready"
	// ConditionModelResolved says whether the Agent has a usable model (provider
	// known, API key Secret present with its key).
	ConditionModelResolved = "ModelResolved"
	// ConditionToolsResolved says whether the Agent's tool policy resolved to an
	// effective tool set. A True status may still carry warnings (reason
	// ReasonResolvedWithWarnings).
	ConditionToolsResolved = "ToolsResolved"
	// ConditionReferencesResolved says whether every object the spec names
	// (delegate Agents, BrowserProfile, skill ConfigMaps, channel Secrets, the
	// CronJob's Agent) exists.
	ConditionReferencesResolved = "ReferencesResolved"
	// ConditionRuntimeReady says whether the Agent's session pods can run
	// (operator with a runtime configured only): image pulls, the pod's
	// configuration and the namespace quota.
	ConditionRuntimeReady = "RuntimeReady"
	// ConditionScheduleValid says whether a CronJob's schedule parses and will fire.
	ConditionScheduleValid = "ScheduleValid"
	// ConditionSpecValid is set, False, when a stored field holds a value the
	// schema now refuses (an object written before an upgrade tightened it);
	// the object then stays not Ready until it is fixed.
	ConditionSpecValid = "SpecValid"
	// ConditionStalled is set, True, when the object cannot become Ready
	// until its spec (or the platform's configuration) changes (kstatus'
	// Stalled: an invalid spec, a runtime policy violation, a pod the API
	// server refuses); it is absent otherwise. kstatus reads it as Failed.
	ConditionStalled = "Stalled"
	// ConditionReconciling is set, True, while the object is on its way to
	// Ready: the operator retries, waits for something outside the object
	// (a Secret or Agent it names, a browser or session pod starting), or
	// fills an Agent's warm pool; it is absent otherwise, and never set
	// together with Stalled. kstatus reads it as InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionWithinQuota says whether the tenant's TenantQuota (or the
	// operator's default caps) lets the operator create what the object
	// needs: False with reason ReasonSessionPodLimit, ReasonWarmPodLimit
	// (Agents) or ReasonCronJobLimit (CronJobs) when a cap holds it back,
	// True again once the tenant has room. Set only on objects of a tenant
	// with such a cap. An Agent's does not feed its Ready (its running
	// sessions go on); a CronJob's does (it is not scheduled). A
	// BrowserProfile held back says so on Ready (ReasonBrowserPodLimit).
	ConditionWithinQuota = "WithinQuota"
)

// Condition reasons. They are CamelCase, stable, and documented because users and
// alerting rules match on them.
const (
	// ReasonReady: all conditions hold.
	ReasonReady = "Ready"
	// ReasonNotReady: at least one condition does not hold; the message names it.
	ReasonNotReady = "NotReady"

	// ReasonResolvedFromSpec: spec.model is usable and is the effective model.
	ReasonResolvedFromSpec = "ResolvedFromSpec"
	// ReasonResolvedFromFallback: spec.model is unusable; a fallback model is used.
	ReasonResolvedFromFallback = "ResolvedFromFallback"
	// ReasonResolvedFromNamespaceDefault: no spec.model; the namespace default
	// (ConfigMap picobot-defaults) is used.
	ReasonResolvedFromNamespaceDefault = "ResolvedFromNamespaceDefault"
	// ReasonNoModelConfigured: neither spec.model nor a namespace default exists.
	ReasonNoModelConfigured = "NoModelConfigured"
	// ReasonSecretNotFound: the API key Secret of every candidate model is missing.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretKeyNotFound: the Secret exists but lacks the referenced key.
	ReasonSecretKeyNotFound = "SecretKeyNotFound"
	// ReasonPlaceholderKey: the referenced key holds a placeholder
	// ("placeholder-…", "changeme", "<your key>", ...) instead of an API key,
	// as samples and demos write when no key was given.
	ReasonPlaceholderKey = "PlaceholderKey"
	// ReasonInvalidNamespaceDefault: the picobot-defaults ConfigMap is malformed.
	ReasonInvalidNamespaceDefault = "InvalidNamespaceDefault"

	// ReasonResolved: the tool policy or references resolved without findings.
	ReasonResolved = "Resolved"
	// ReasonResolvedWithWarnings: the tool policy resolved, but something was
	// ignored (for example an allow list naming only unknown tools).
	ReasonResolvedWithWarnings = "ResolvedWithWarnings"
	// ReasonInvalidToolPolicy: the tool policy cannot be resolved.
	ReasonInvalidToolPolicy = "InvalidToolPolicy"
	// ReasonReferenceNotFound: an object named in the spec does not exist.
	ReasonReferenceNotFound = "ReferenceNotFound"
	// ReasonInvalidReference: a reference is not allowed (e.g. an Agent delegating
	// to itself).
	ReasonInvalidReference = "InvalidReference"

	// ReasonPodsReady: session pods start and claim sessions.
	ReasonPodsReady = "PodsReady"
	// ReasonImagePullFailed: the runtime image cannot be pulled.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonPodConfigError: a session pod cannot be configured (typically a
	// missing Secret or key it references).
	ReasonPodConfigError = "PodConfigError"
	// ReasonPodFailed: session pods exit with an error before serving.
	ReasonPodFailed = "PodFailed"
	// ReasonQuotaExceeded: the namespace's ResourceQuota forbids more pods.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonPolicyViolation: the Agent's runtime settings are outside the
	// platform's runtime policy (image, RuntimeClass, resources, pool
	// sizes); the message names the rule. Its pods are not created.
	ReasonPolicyViolation = "PolicyViolation"
	// ReasonRuntimeClassNotFound: the RuntimeClass the session pods name
	// does not exist in the cluster.
	ReasonRuntimeClassNotFound = "RuntimeClassNotFound"
	// ReasonPodCreateFailed: the API server refused to create a session pod;
	// the message carries its error.
	ReasonPodCreateFailed = "PodCreateFailed"
	// ReasonPodsStarting: the Agent's warm pool is not full yet and session
	// pods are starting (condition Reconciling only; Ready stays True, as a
	// session can already start).
	ReasonPodsStarting = "PodsStarting"

	// ReasonBrowserStarting: a session asked for a BrowserProfile's browser
	// and its pod is not serving yet.
	ReasonBrowserStarting = "BrowserStarting"
	// ReasonStorageNotConfigured: a BrowserProfile is stored in S3, but the
	// operator has no bucket (PICOBOT_S3_BUCKET), so it cannot keep it.
	ReasonStorageNotConfigured = "StorageNotConfigured"
	// ReasonBrowserPodsDisabled: a session asked for a browser, but the
	// operator runs no browser pods (no --browser-image).
	ReasonBrowserPodsDisabled = "BrowserPodsDisabled"

	// ReasonScheduled: the schedule is valid and the next run time is known.
	ReasonScheduled = "Scheduled"
	// ReasonSuspended: spec.suspend is true; nothing will fire.
	ReasonSuspended = "Suspended"
	// ReasonAtInPast: a one-shot `at` schedule lies in the past and has not run.
	ReasonAtInPast = "AtInPast"
	// ReasonCompleted: a one-shot `at` schedule has run.
	ReasonCompleted = "Completed"
	// ReasonInvalidSchedule: the cron expression or time zone does not parse.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonInvalidSpec: a stored field is invalid (see ConditionSpecValid).
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonWithinQuota: the tenant's caps leave room (ConditionWithinQuota).
	ReasonWithinQuota = "WithinQuota"
	// ReasonSessionPodLimit: the tenant's maxSessionPods is reached and a
	// chat waiting for a session pod gets none until one exits.
	ReasonSessionPodLimit = "SessionPodLimit"
	// ReasonWarmPodLimit: the tenant's maxWarmPods (or maxSessionPods) keeps
	// the Agent's warm pool below spec.runtime.warmPool; no chat waits.
	ReasonWarmPodLimit = "WarmPodLimit"
	// ReasonBrowserPodLimit: the tenant's maxBrowserPods is reached and a
	// session asking for this browser gets none until another stops.
	ReasonBrowserPodLimit = "BrowserPodLimit"
	// ReasonCronJobLimit: the CronJob is past the tenant's maxCronJobs (in
	// creation order) and is not scheduled.
	ReasonCronJobLimit = "CronJobLimit"
)

// Labels and well-known names.
const (
	// LabelAgentMade marks objects that an agent created through its tools (cron_add,
	// browser_profiles create), so GitOps tools can ignore them.
	LabelAgentMade = "agents.picobot.io/agent-made"
	// LabelAgent names the Agent an object belongs to.
	LabelAgent = "agents.picobot.io/agent"
	// NamespaceDefaultsConfigMap is the ConfigMap holding a namespace's default model
	// (keys: provider, model, baseURL, apiKeySecret, apiKeySecretKey, contextWindow).
	NamespaceDefaultsConfigMap = "picobot-defaults"
)
