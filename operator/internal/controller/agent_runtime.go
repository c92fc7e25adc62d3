package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
)

// RuntimeConfig turns on session pods: without it the operator only
// publishes Agent status (the mode of the first releases and of tests that
// need no Redis).
type RuntimeConfig struct {
	// apiServer is the API server's addresses as last read, shared by the
	// reconcilers that write the session pods' NetworkPolicy.
	apiServer apiServerAddrs
	// Image is the default runtime image of session pods.
	Image string
	// BrowserImage runs browser pods (Chromium behind `picobot browser`).
	BrowserImage string
	// Redis and Bus reach the wake streams and pod registry.
	Redis *redis.Client
	Bus   bus.Bus
	// Connection holds the operator's connection settings
	// (PICOBOT_POSTGRES_URL, PICOBOT_REDIS_URL, PICOBOT_S3_*...).
	Connection map[string]string
	// Tenants gives each tenant namespace's connection Secret; nil shares
	// Connection with every namespace. Either way its S3 settings are
	// replaced by BlobURL (see grantedBlobs).
	Tenants TenantConnection
	// BlobURL is the blob grant service's URL, given to session pods.
	BlobURL string
	// Network shapes the session pods' NetworkPolicy.
	Network podspec.Network
	// Env is added to every session pod (e.g. PICOBOT_LEASE_TTL).
	Env []corev1.EnvVar
	// MetricsPort is where session pods serve PicoBot's metrics (0: they
	// serve none); their NetworkPolicy admits scrapes of it from
	// Network.MetricsFrom (Network.MetricsPort is set from it).
	MetricsPort int32
	// APIReader reads uncached (pods the cache has not seen yet).
	APIReader client.Reader
	// PairSecretGrace is how long a sandbox pair's Secret may exist without
	// its session pod before it is deleted as an orphan (the operator died
	// between creating the two); a minute when zero.
	PairSecretGrace time.Duration
	// ResyncBusy is how often an agent with pods is looked at again, since
	// pods change state in Redis, which sends no events.
	ResyncBusy time.Duration
	// Policy is the platform's runtime policy.
	Policy RuntimePolicy
	// Metrics records the pools' pods; nil records nothing.
	Metrics *opmetrics.Metrics
	// Sandbox is where the tools' programs of session pods run (the
	// platform's --sandbox-placement); empty: in a sandbox container. A
	// namespace labelled podspec.LabelSandboxPlacement by the platform
	// team has its own.
	Sandbox podspec.SandboxPlacement
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// placement is where the session pods of namespace ns run their tools:
// the namespace's podspec.LabelSandboxPlacement, else the platform's
// default. Namespaces are the platform team's (cluster-scoped; a tenant
// edits what is in its namespace, not the namespace), so the label is
// platform policy. An operator that may not read namespaces (namespaced
// RBAC) uses the default.
func (rc *RuntimeConfig) placement(ctx context.Context, reader client.Reader, ns string) podspec.SandboxPlacement {
	def := rc.Sandbox
	if def == "" {
		def = podspec.SandboxInContainer
	}
	var n corev1.Namespace
	if err := reader.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
		return def
	}
	v, ok := n.Labels[podspec.LabelSandboxPlacement]
	if !ok {
		return def
	}
	p, err := podspec.ParseSandboxPlacement(v)
	if err != nil {
		log.FromContext(ctx).Info("Ignoring the namespace's sandbox placement", "namespace", ns, "err", err.Error())
		return def
	}
	return p
}

// createRetry is when an Agent whose pod the API server refused is looked at
// again: what refused it (a RuntimeClass, a quota, an admission policy)
// sends the Agent no event when it changes.
const createRetry = 30 * time.Second

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=agents.picobot.io,resources=cronjobs;browserprofiles,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agents.picobot.io,resources=tenantquotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// runtimeResult is what the runtime phase contributes to status.
type runtimeResult struct {
	cond metav1.Condition
	// progress, when set, says the warm pool is still filling (the
	// Reconciling condition's cause while cond is True).
	progress     *metav1.Condition
	active, warm int32
	requeue      time.Duration
}

// runtimePhase keeps the Agent's session pods: it writes their identity and
// network objects, reads the pods, the registry and the wake stream, and
// applies the warm pool's plan (planPool decides; this only reads and writes).
func (r *AgentReconciler) runtimePhase(ctx context.Context, s *agentScope) error {
	if r.Runtime == nil {
		return nil
	}
	a := s.agent
	pol, err := r.policyOf(ctx, a)
	if err != nil {
		return err
	}
	s.policy = pol
	if err := r.ensureNamespace(ctx, a.Namespace); err != nil {
		return err
	}
	for _, obj := range []client.Object{podspec.ServiceAccount(a), podspec.Role(a), podspec.RoleBinding(a)} {
		if err := r.ensureOwned(ctx, obj); err != nil {
			return err
		}
	}
	in, listed, err := r.poolInput(ctx, s)
	if err != nil {
		return err
	}
	plan := planPool(in)
	res, err := r.applyPoolPlan(ctx, s, plan, listed)
	if err != nil {
		return err
	}
	r.Runtime.Metrics.WarmTarget(a.Namespace, a.Name, in.WarmPool)
	r.Runtime.Metrics.PodsRegistered(a.Namespace, a.Name, registeredPods(listed, in.Registry))
	if pol.violation != "" {
		res.cond = condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPolicyViolation, "Runtime policy: "+pol.violation)
	}
	// The warm pool filling is progress to report only while no session
	// runs (a new or rolled-out Agent): a busy Agent refills its pool all
	// day, and a GitOps tool waiting for Current would wait with it.
	if starting := plan.Starting + plan.Create; res.cond.Status == metav1.ConditionTrue && plan.Active == 0 && plan.Warm < in.WarmPool && starting > 0 {
		res.progress = ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, true, picobotv1alpha1.ReasonPodsStarting,
			fmt.Sprintf("Warm pool filling: %d of %d warm, %d starting", plan.Warm, in.WarmPool, starting)))
	}
	s.runtime = res
	return nil
}

// registeredPods are the listed live pods whose runtime has registered with
// the pool: started, for the pool's start latency.
func registeredPods(listed map[string]*corev1.Pod, registry map[string]string) []opmetrics.RegisteredPod {
	var out []opmetrics.RegisteredPod
	for name, p := range listed {
		if _, ok := registry[name]; ok && p.DeletionTimestamp == nil {
			out = append(out, opmetrics.RegisteredPod{UID: p.UID, Created: p.CreationTimestamp.Time})
		}
	}
	return out
}

// policyOf applies the runtime policy to the Agent, the per-namespace rules
// over the namespace's Agents from the cache.
func (r *AgentReconciler) policyOf(ctx context.Context, a *picobotv1alpha1.Agent) (policyResult, error) {
	p := &r.Runtime.Policy
	res := p.check(a, r.Runtime.Image)
	if res.violation != "" || p.MaxWarmPodsPerNamespace == nil {
		return res, nil
	}
	var agents picobotv1alpha1.AgentList
	if err := r.List(ctx, &agents, client.InNamespace(a.Namespace)); err != nil {
		return res, fmt.Errorf("failed to list the Agents of namespace %q: %w", a.Namespace, err)
	}
	if !slices.ContainsFunc(agents.Items, func(o picobotv1alpha1.Agent) bool { return o.Name == a.Name }) {
		agents.Items = append(agents.Items, *a) // not in the cache yet
	}
	res.violation = p.namespaceWarmViolation(agents.Items, a.Name, r.Runtime.Image)
	return res, nil
}

// namespaceRoom is how many more sessions the namespace's policy allows: its
// maximum less the busy session pods of the namespace (nil: no maximum).
func (r *AgentReconciler) namespaceRoom(ctx context.Context, ns string) (*int32, error) {
	m := r.Runtime.Policy.MaxSessionsPerNamespace
	if m == nil {
		return nil, nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentSession},
		client.HasLabels{podspec.LabelSession}); err != nil {
		return nil, fmt.Errorf("failed to list the session pods of namespace %q: %w", ns, err)
	}
	busy := int32(0)
	for i := range pods.Items {
		if poolPodOf(&pods.Items[i]).live() {
			busy++
		}
	}
	return ptrTo(max(0, *m-busy)), nil
}

// poolInput reads what the pool plan is decided from: the session pods (also
// returned by name, for the writes), the pod registry, whether each
// registered pod missing from the list is really gone, and the unclaimed
// wakes.
func (r *AgentReconciler) poolInput(ctx context.Context, s *agentScope) (poolInput, map[string]*corev1.Pod, error) {
	a, rc := s.agent, r.Runtime
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(a.Namespace), client.MatchingLabels(podspec.SessionLabels(a))); err != nil {
		return poolInput{}, nil, fmt.Errorf("failed to list session pods: %w", err)
	}
	registry, err := rc.Redis.HGetAll(ctx, wake.PodsKey(a.Namespace, a.Name)).Result()
	if err != nil {
		return poolInput{}, nil, fmt.Errorf("failed to read the pod registry: %w", err)
	}
	in := poolInput{Registry: registry, Gone: map[string]bool{}, CanRun: s.model.Effective != nil && s.policy.violation == "",
		MaxSessions: s.policy.maxSessions}
	if rt := a.Spec.Runtime; rt != nil && rt.WarmPool != nil {
		in.WarmPool = *rt.WarmPool
	}
	if in.NamespaceRoom, err = r.namespaceRoom(ctx, a.Namespace); err != nil {
		return poolInput{}, nil, err
	}
	if s.caps, err = tenantCapsOf(ctx, r.Client, r.Quota, a.Namespace); err != nil {
		return poolInput{}, nil, err
	}
	if m := s.caps.warmPods; m != nil {
		others, err := countSessionPods(ctx, r.Client, a.Namespace, a.Name)
		if err != nil {
			return poolInput{}, nil, err
		}
		in.WarmRoom = ptrTo(max(0, *m-others.warm))
	}
	listed := make(map[string]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		listed[pods.Items[i].Name] = &pods.Items[i]
		in.Pods = append(in.Pods, poolPodOf(&pods.Items[i]))
	}
	// Pods created a moment ago may be missing from the cache: they are
	// starting.
	for _, name := range r.expected.unseen(client.ObjectKeyFromObject(a), listed) {
		in.Pods = append(in.Pods, poolPod{Name: name, Phase: corev1.PodPending})
	}
	// The list comes from the cache: a registered pod it lacks may only be
	// too new for it, so the API server is asked.
	for _, name := range unregisteredOrphans(in.Pods, registry) {
		if in.Gone[name], err = r.podGone(ctx, a.Namespace, name); err != nil {
			return poolInput{}, nil, err
		}
		// A pod deleted while it held an answered chat (its idle
		// timeout) leaves nothing to reclaim: a re-wake would start a
		// pod that finds nothing and stays idle.
		if st := parseState(registry[name]); in.Gone[name] && st.busy {
			waiting, err := r.chatWaiting(ctx, a, wake.Wake{Channel: st.channel, ChatKey: st.chat})
			if err != nil {
				return poolInput{}, nil, err
			}
			if !waiting {
				if in.Answered == nil {
					in.Answered = map[string]bool{}
				}
				in.Answered[st.channel+" "+st.chat] = true
			}
		}
	}
	if in.Wakes, err = r.unclaimedWakes(ctx, a); err != nil {
		return poolInput{}, nil, err
	}
	return in, listed, nil
}

// applyPoolPlan carries out plan in the order that loses nothing: reap; for
// each gone pod, wake its chat again before dropping its entry (a failed wake
// leaves the entry for the next try, and no entry is woken twice); label busy
// pods; create pods. It returns what status reports; a quota that stops
// creation is reported, not retried.
func (r *AgentReconciler) applyPoolPlan(ctx context.Context, s *agentScope, plan poolPlan, listed map[string]*corev1.Pod) (*runtimeResult, error) {
	a, rc := s.agent, r.Runtime
	for _, name := range plan.Reap {
		if err := r.Delete(ctx, listed[name]); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("failed to reap pod %s: %w", name, err)
		}
	}
	rc.Metrics.PodsReaped(a.Namespace, a.Name, len(plan.Reap))
	rc.Metrics.Pool(a.Namespace, a.Name, plan.Active, plan.Warm, plan.Starting)
	rewakes := map[string]rewake{}
	for _, w := range plan.Rewake {
		rewakes[w.Pod] = w
	}
	for _, name := range plan.Drop {
		if w, ok := rewakes[name]; ok {
			if err := wake.Publish(ctx, rc.Bus, wake.Wake{Tenant: a.Namespace, Agent: a.Name, Channel: w.Channel, ChatKey: w.Chat}); err != nil {
				return nil, err
			}
			log.FromContext(ctx).Info("Re-woke the chat of a dead session pod", "pod", name, "chat", w.Chat)
			rc.Metrics.Rewoken(a.Namespace, a.Name)
		}
		if err := rc.Redis.HDel(ctx, wake.PodsKey(a.Namespace, a.Name), name).Err(); err != nil {
			return nil, fmt.Errorf("failed to drop pod %s from the registry: %w", name, err)
		}
	}
	for _, l := range plan.Label {
		if listed[l.Pod] == nil {
			continue // not in the cache yet: labelled at the next pass
		}
		if err := r.labelSession(ctx, listed[l.Pod], l.Value); err != nil {
			return nil, fmt.Errorf("failed to label pod %s with its session: %w", l.Pod, err)
		}
	}
	res := &runtimeResult{active: plan.Active, warm: plan.Warm,
		cond: condition(picobotv1alpha1.ConditionRuntimeReady, true, picobotv1alpha1.ReasonPodsReady,
			fmt.Sprintf("%d active, %d warm, %d starting", plan.Active, plan.Warm, plan.Starting))}
	if plan.Problem != nil {
		res.cond = *plan.Problem
	}
	if plan.Requeue {
		res.requeue = rc.ResyncBusy
	}
	if s.caps.pods() {
		unlock := r.podLocks.lock(a.Namespace)
		defer unlock()
		held, err := r.capSessionPods(ctx, s, &plan)
		if err != nil {
			return nil, err
		}
		if held && res.requeue == 0 {
			// Room comes back when a pod of any of the tenant's Agents
			// exits, which sends this one no event.
			res.requeue = rc.ResyncBusy
		}
	}
	var made int32
	// The chats' pods come first in Create: those made beyond none are
	// the warm pool's misses.
	defer func() { rc.Metrics.ColdStarts(a.Namespace, a.Name, min(made, plan.WakeNeed)) }()
	for range plan.Create {
		err := r.createPod(ctx, s)
		rc.Metrics.PodCreated(a.Namespace, a.Name, err != nil)
		if err != nil {
			c, ok := createProblem(err)
			if !ok {
				return nil, err
			}
			res.cond, res.requeue = c, createRetry
			break
		}
		made++
	}
	return res, nil
}

// capSessionPods holds plan.Create to the tenant's maxSessionPods, counting
// the namespace's session pods on the API server (the cache may lack pods
// created a moment ago; the caller holds the namespace's lock, so no other
// reconcile creates one meanwhile), and sets s.quota. It reports whether
// a cap holds pods back.
func (r *AgentReconciler) capSessionPods(ctx context.Context, s *agentScope, plan *poolPlan) (bool, error) {
	a, caps := s.agent, s.caps
	// warmHeld are warm pods held back by maxWarmPods; held, chatsHeld
	// (of them for waiting chats) by maxSessionPods.
	var warmHeld, held, chatsHeld, live int32
	if plan.Create > 0 {
		reader := r.Runtime.APIReader
		if reader == nil {
			reader = r.Client
		}
		n, err := countSessionPods(ctx, reader, a.Namespace, "")
		if err != nil {
			return false, err
		}
		// The plan's warm room came from the cache; this count is exact.
		// Pods starting for chats count as warm until they serve, which
		// errs on the side of the cap.
		if m := caps.warmPods; m != nil {
			if warm, room := plan.Create-plan.WakeNeed, max(0, *m-n.warm); warm > room {
				warmHeld = warm - room
				plan.Create -= warmHeld
			}
		}
		if m := caps.sessionPods; m != nil {
			if room := max(0, *m-n.live); plan.Create > room {
				held, chatsHeld = plan.Create-room, max(0, plan.WakeNeed-room)
				plan.Create = room
			}
		}
		live = n.live + plan.Create
	}
	warmHeld += plan.WarmHeld
	switch {
	case chatsHeld > 0:
		s.quota = ptrTo(withinQuota(picobotv1alpha1.ReasonSessionPodLimit, fmt.Sprintf(
			"%d chat(s) wait for a session pod: the tenant's maxSessionPods is %d and %d run in the namespace; they start as pods exit", chatsHeld, *caps.sessionPods, live)))
	case held > 0:
		s.quota = ptrTo(withinQuota(picobotv1alpha1.ReasonWarmPodLimit, fmt.Sprintf(
			"Warm pool %d pod(s) short: the tenant's maxSessionPods is %d and %d run in the namespace", held+warmHeld, *caps.sessionPods, live)))
	case warmHeld > 0:
		s.quota = ptrTo(withinQuota(picobotv1alpha1.ReasonWarmPodLimit, fmt.Sprintf(
			"Warm pool held %d pod(s) below spec.runtime.warmPool by the tenant's maxWarmPods of %d", warmHeld, *caps.warmPods)))
	default:
		s.quota = ptrTo(withinQuota("", ""))
	}
	return held > 0 || warmHeld > 0, nil
}

// createProblem turns a pod creation the API server refused for a reason
// that stands (a quota, a missing RuntimeClass, an invalid pod or an
// admission policy) into the RuntimeReady condition reporting it, with the
// API server's message; ok is false for errors worth retrying at once.
func createProblem(err error) (c metav1.Condition, ok bool) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return c, false
	}
	msg := status.Status().Message
	if d := status.Status().Details; d != nil && d.Name != "" {
		// The generated pod name differs on every try: without it the
		// condition, and its event, stay the same while the cause does.
		msg = strings.Replace(msg, strconv.Quote(d.Name)+" ", "", 1)
	}
	reason := picobotv1alpha1.ReasonPodCreateFailed
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(msg, "exceeded quota"):
		reason = picobotv1alpha1.ReasonQuotaExceeded
	case strings.Contains(msg, "RuntimeClass") && strings.Contains(msg, "not found"):
		reason = picobotv1alpha1.ReasonRuntimeClassNotFound
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err):
		return c, false
	}
	return condition(picobotv1alpha1.ConditionRuntimeReady, false, reason, "Cannot create session pods: "+msg), true
}

// unclaimedWakes lists the chats of the wakes no pod has read yet (those
// after the pods' group's position on the wake stream) that have messages
// waiting, each chat once, up to maxUnclaimed entries read. A chat is woken
// again while it has no owner: the gateway re-wakes a waiting send's chat
// every Rewake (2 s), and more so while the chat's pod is still starting, so
// the stream holds several wakes of one chat, and those left once the chat
// was served wake nothing. Counting entries (the group's lag) gave each of
// them a pod: a pod slow to start (seconds, on a real node) made the
// operator create another one per re-wake, and the surplus read the
// re-wakes, found nothing to serve and stayed as idle pods. The entries are
// read rather than the lag, which Redis also reports as unknown when it
// cannot count them (entries deleted, or a position moved without its
// count, as the crash campaign met after Redis restarts).
func (r *AgentReconciler) unclaimedWakes(ctx context.Context, a *picobotv1alpha1.Agent) ([]string, error) {
	stream := wake.Stream(a.Namespace, a.Name)
	groups, err := r.Runtime.Redis.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to read wake stream: %w", err)
	}
	from := "-"
	for _, g := range groups {
		if g.Name != wake.GroupPods {
			continue
		}
		if g.Lag == 0 {
			return nil, nil
		}
		from = "(" + g.LastDeliveredID
	}
	unread, err := r.Runtime.Redis.XRangeN(ctx, stream, from, "+", maxUnclaimed).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read the unread wakes: %w", err)
	}
	var out []string
	for _, c := range wakeChats(stream, unread) {
		if c.wake != nil {
			waiting, err := r.chatWaiting(ctx, a, *c.wake)
			if err != nil {
				return nil, err
			}
			if !waiting {
				continue
			}
		}
		out = append(out, c.key)
	}
	return out, nil
}

// chatWaiting reports whether the chat of wake w has messages no runtime
// has finished: its stream's group has entries unread or pending. A chat
// without a stream or group yet (a scheduled run's or a stateless request's
// wake, a chat's first message) counts as waiting, and so does a lag Redis
// cannot tell.
func (r *AgentReconciler) chatWaiting(ctx context.Context, a *picobotv1alpha1.Agent, w wake.Wake) (bool, error) {
	groups, err := r.Runtime.Redis.XInfoGroups(ctx, wake.ChatStream(a.Namespace, a.Name, w.Channel, w.ChatKey)).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return true, nil
		}
		return false, fmt.Errorf("failed to read the stream of chat %q: %w", w.ChatKey, err)
	}
	for _, g := range groups {
		if g.Name == protocol.ChatGroup {
			return g.Lag != 0 || g.Pending > 0, nil
		}
	}
	return true, nil
}

// wakeChat is one chat of the unread wakes: key is "<channel> <chat>" (a
// busy registry entry's chat; a scheduled run's and a stateless request's
// wake has a chat of its own), wake the wake (nil for an entry that is no
// wake, which counts on its own: a pod acks it as malformed).
type wakeChat struct {
	key  string
	wake *wake.Wake
}

// wakeChats lists the distinct chats of wake entries, sorted by key.
func wakeChats(stream string, entries []redis.XMessage) []wakeChat {
	seen := map[string]bool{}
	var out []wakeChat
	for _, e := range entries {
		var w wake.Wake
		c := wakeChat{key: "entry " + e.ID}
		if json.Unmarshal(redisbus.Decode(stream, e).Payload, &w) == nil && w.ChatKey != "" {
			c = wakeChat{key: w.Channel + " " + w.ChatKey, wake: &w}
		}
		if !seen[c.key] {
			seen[c.key] = true
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// podGone asks the API server (uncached: the cache may not have seen a new
// pod yet) whether a registered pod is gone or finished.
func (r *AgentReconciler) podGone(ctx context.Context, ns, name string) (bool, error) {
	reader := r.Runtime.APIReader
	if reader == nil {
		reader = r.Client
	}
	var p corev1.Pod
	err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("failed to read pod %s: %w", name, err)
	}
	return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
}

// labelSession labels a busy pod with its chat's session, so the pod
// serving a chat can be found by label.
func (r *AgentReconciler) labelSession(ctx context.Context, p *corev1.Pod, value string) error {
	if p.Labels[podspec.LabelSession] == value {
		return nil
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[podspec.LabelSession] = value
	return client.IgnoreNotFound(r.Patch(ctx, p, patch))
}

// createPod creates one session pod of the agent under a generated name,
// with the resources the runtime policy gives it.
func (r *AgentReconciler) createPod(ctx context.Context, s *agentScope) error {
	a := s.agent.DeepCopy()
	if a.Spec.Runtime == nil {
		a.Spec.Runtime = &picobotv1alpha1.RuntimeSpec{}
	}
	a.Spec.Runtime.Resources = &s.policy.resources
	in := podspec.Input{Agent: a, Image: r.Runtime.Image, SecretKeys: s.secretKeys, Env: r.Runtime.Env, MetricsPort: r.Runtime.MetricsPort}
	if r.Runtime.placement(ctx, r.Runtime.namespaceObjects(r.Client).reader, a.Namespace) == podspec.SandboxInPod {
		return r.createPaired(ctx, s, in)
	}
	p := podspec.SessionPod(in)
	p.Name, p.GenerateName = "", s.agent.Name+"-"
	if err := r.Create(ctx, p); err != nil {
		return fmt.Errorf("failed to create a session pod: %w", err)
	}
	r.expected.created(client.ObjectKeyFromObject(s.agent), p.Name)
	return nil
}

// createPaired creates a session pod whose tools run in a sandbox pod: its
// pair's Secret first (the runtime reads it at start), under a name chosen
// here, then the pod; the sandbox pod follows (SandboxPairReconciler).
func (r *AgentReconciler) createPaired(ctx context.Context, s *agentScope, in podspec.Input) error {
	base := s.agent.Name + "-"
	if len(base) > maxGeneratedBase {
		base = base[:maxGeneratedBase]
	}
	in.Name, in.Sandbox = base+utilrand.String(5), podspec.SandboxInPod
	cred, err := paircred.Generate(podspec.PairName(in.Name), time.Now())
	if err != nil {
		return err
	}
	sec := podspec.PairSecret(s.agent, in.Name, cred)
	if err := r.Create(ctx, sec); err != nil {
		return fmt.Errorf("failed to create the sandbox pair Secret %q: %w", sec.Name, err)
	}
	if err := r.Create(ctx, podspec.SessionPod(in)); err != nil {
		_ = r.Delete(ctx, sec)
		return fmt.Errorf("failed to create a session pod: %w", err)
	}
	r.expected.created(client.ObjectKeyFromObject(s.agent), in.Name)
	return nil
}

// maxGeneratedBase is the longest name prefix the API server keeps of a
// generateName (63 less the 5 random characters).
const maxGeneratedBase = 58

// namespaceObjects is the writer of rc's namespace objects through c.
func (rc *RuntimeConfig) namespaceObjects(c client.Client) *namespaceObjects {
	reader := rc.APIReader
	if reader == nil {
		reader = c
	}
	var conn TenantConnection = SharedConnection(rc.Connection)
	if rc.Tenants != nil {
		conn = rc.Tenants
	}
	// The restart watcher and rotator are taken before the wrapper, whose
	// method set would hide them (then lost Redis users were never restored).
	watcher, _ := conn.(restartWatcher)
	rot, _ := conn.(rotator)
	conn = grantedBlobs{TenantConnection: conn, url: rc.BlobURL}
	network := rc.Network
	network.MetricsPort = rc.MetricsPort
	return &namespaceObjects{client: c, reader: reader, conn: conn, watcher: watcher, rotator: rot, network: network, api: &rc.apiServer,
		placement: func(ctx context.Context, ns string) podspec.SandboxPlacement { return rc.placement(ctx, reader, ns) }}
}

// ensureNamespace creates the namespace's connection Secret and NetworkPolicy
// when the cache lacks them, so no session pod starts without them; the
// namespace-objects reconciler keeps their content.
func (r *AgentReconciler) ensureNamespace(ctx context.Context, ns string) error {
	objs := r.Runtime.namespaceObjects(r.Client)
	ok, err := objs.present(ctx, ns)
	if err != nil || ok {
		return err
	}
	return objs.ensure(ctx, ns)
}

// ensureOwned creates one of the agent's objects (ServiceAccount, Role,
// RoleBinding) or brings back the fields the operator owns. The cache holds
// only objects labelled as the operator's: one whose label was taken off is
// read from the API server when creating it finds it there.
func (r *AgentReconciler) ensureOwned(ctx context.Context, want client.Object) error {
	key := client.ObjectKeyFromObject(want)
	cur := want.DeepCopyObject().(client.Object)
	err := r.Get(ctx, key, cur)
	if apierrors.IsNotFound(err) {
		if err = r.Create(ctx, want.DeepCopyObject().(client.Object)); err == nil {
			return nil
		} else if apierrors.IsAlreadyExists(err) {
			err = r.Runtime.namespaceObjects(r.Client).reader.Get(ctx, key, cur)
		}
	}
	if err != nil {
		return fmt.Errorf("failed to get %T %q: %w", want, want.GetName(), err)
	}
	before := cur.DeepCopyObject().(client.Object)
	switch c := cur.(type) {
	case *corev1.ServiceAccount:
		c.AutomountServiceAccountToken = want.(*corev1.ServiceAccount).AutomountServiceAccountToken
	case *rbacv1.Role:
		c.Rules = want.(*rbacv1.Role).Rules
	case *rbacv1.RoleBinding:
		c.RoleRef, c.Subjects = want.(*rbacv1.RoleBinding).RoleRef, want.(*rbacv1.RoleBinding).Subjects
	}
	labels, _ := withLabels(cur.GetLabels(), want.GetLabels())
	cur.SetLabels(labels)
	cur.SetOwnerReferences(want.GetOwnerReferences())
	if equality.Semantic.DeepEqual(before, cur) {
		return nil
	}
	if err := r.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to update %T %q: %w", want, want.GetName(), err)
	}
	return nil
}

// podProblem reports a pod that cannot start.
func podProblem(p *corev1.Pod) *metav1.Condition {
	if pr := waitingProblem(p, "session pod"); pr != nil {
		return ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false, pr.reason, pr.message))
	}
	return nil
}

// podFailure says why a failed pod stopped: its container's exit, else the
// pod's message.
func podFailure(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			msg := fmt.Sprintf("exit code %d", t.ExitCode)
			if t.Message != "" {
				msg += ": " + t.Message
			} else if t.Reason != "" {
				msg += " (" + t.Reason + ")"
			}
			return msg
		}
	}
	if p.Status.Message != "" {
		return p.Status.Message
	}
	return "no reason given"
}

// ptrTo returns a pointer to a copy of v.
func ptrTo[T any](v T) *T { return &v }

// secretKeysOf lists the Secret keys a session pod of a needs in its
// environment: the model chain's keys (including the namespace default's),
// the MCP servers' secretKeyRefs, the web search key and the saved
// credentials of spec.tools.secrets.
func secretKeysOf(a *picobotv1alpha1.Agent, defaults *corev1.ConfigMap) []corev1.SecretKeySelector {
	var out []corev1.SecretKeySelector
	if m := a.Spec.Model; m != nil {
		for _, ref := range agentspec.ModelRefs(m) {
			if ref.APIKeySecretRef != nil {
				out = append(out, *ref.APIKeySecretRef)
			}
		}
	} else if defaults != nil && defaults.Data["apiKeySecret"] != "" {
		key := defaults.Data["apiKeySecretKey"]
		if key == "" {
			key = "apiKey"
		}
		out = append(out, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: defaults.Data["apiKeySecret"]}, Key: key})
	}
	for _, srv := range a.Spec.MCPServers {
		for _, e := range srv.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, *e.ValueFrom.SecretKeyRef)
			}
		}
	}
	if t := a.Spec.Tools; t != nil && t.WebSearch != nil && t.WebSearch.APIKeySecretRef != nil {
		out = append(out, *t.WebSearch.APIKeySecretRef)
	}
	// The saved credentials bot_secret types into web pages.
	if t := a.Spec.Tools; t != nil {
		for _, s := range t.Secrets {
			out = append(out, s.SecretKeyRef)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name+"/"+out[i].Key < out[j].Name+"/"+out[j].Key })
	return out
}

// delegateTargets enqueues the delegate targets of a busy agent whose wake
// streams hold wakes no pod has claimed. A session pod wakes the runtime of a
// delegated run on the target's wake stream alone: its tenant's Redis user
// cannot write the shared notice stream (wake.Notices). The delegating agent
// is busy while it waits, so it is resynced every ResyncBusy, and with it a
// cold target gets its pod within that.
func (r *AgentReconciler) delegateTargets(ctx context.Context, a *picobotv1alpha1.Agent) {
	if r.wakes == nil {
		return
	}
	seen := map[string]bool{a.Name: true}
	for _, d := range a.Spec.Delegates {
		name := d.AgentRef.Name
		if seen[name] {
			continue
		}
		seen[name] = true
		target := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: name}}
		chats, err := r.unclaimedWakes(ctx, target)
		if err != nil {
			log.FromContext(ctx).V(1).Info("Could not read a delegate target's wakes", "target", name, "err", err.Error())
			continue
		}
		if len(chats) == 0 {
			continue
		}
		select {
		case r.wakes <- event.TypedGenericEvent[*picobotv1alpha1.Agent]{Object: target}:
		default: // full: the target is enqueued already, or will be at the next pass
		}
	}
}

// wakeNotices feeds every wake to the agent controller, so a wake no warm pod
// claims gets a pod at once rather than at the next resync. It runs on the
// leader only, like the controller.
func wakeNotices(b bus.Bus, out chan<- event.TypedGenericEvent[*picobotv1alpha1.Agent]) manager.RunnableFunc {
	return func(ctx context.Context) error {
		// Only the leader reads; a notice is a hint (the resync sees every
		// chat too), so nothing pending needs claiming after a restart.
		c := bus.NewConsumer(b, wake.Notices, wake.GroupOperator, "operator", func(ctx context.Context, msgs []bus.Message) error {
			for _, m := range msgs {
				var w wake.Wake
				if json.Unmarshal(m.Payload, &w) != nil || w.Agent == "" {
					continue
				}
				a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: w.Tenant, Name: w.Agent}}
				select {
				case out <- event.TypedGenericEvent[*picobotv1alpha1.Agent]{Object: a}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, bus.ConsumerOptions{ClaimMinIdle: -1, Logger: slog.New(logr.ToSlogHandler(log.FromContext(ctx).WithName("wakes")))})
		return c.Start(ctx)
	}
}
