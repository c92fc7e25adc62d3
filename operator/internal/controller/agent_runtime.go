package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
)

// RuntimeConfig turns on session pods: without it the operator only
// publishes Agent status (the mode of the first releases and of tests that
// need no Redis).
type RuntimeConfig struct {
	// Image is the default runtime image of session pods.
	Image string
	// BrowserImage runs browser pods (Chromium behind `picobot browser`).
	BrowserImage string
	// Redis and Bus reach the wake streams and pod registry.
	Redis *redis.Client
	Bus   bus.Bus
	// Connection is written to each tenant namespace's connection Secret
	// (PICOBOT_POSTGRES_URL, PICOBOT_REDIS_URL, PICOBOT_S3_*...).
	Connection map[string]string
	// Network shapes the session pods' NetworkPolicy.
	Network podspec.Network
	// Env is added to every session pod (e.g. PICOBOT_LEASE_TTL).
	Env []corev1.EnvVar
	// APIReader reads uncached (pods the cache has not seen yet).
	APIReader client.Reader
	// ResyncBusy is how often an agent with pods is looked at again, since
	// pods change state in Redis, which sends no events.
	ResyncBusy time.Duration
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=agents.picobot.io,resources=cronjobs;browserprofiles,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// runtimeResult is what the runtime phase contributes to status.
type runtimeResult struct {
	cond         metav1.Condition
	active, warm int32
	requeue      time.Duration
}

// podState is a pod's entry in the Redis registry.
type podState struct {
	busy          bool
	channel, chat string
}

func parseState(v string) podState {
	f := strings.SplitN(v, " ", 3)
	if len(f) == 3 && f[0] == "busy" {
		return podState{busy: true, channel: f[1], chat: f[2]}
	}
	return podState{}
}

// ensuredNamespaces remembers namespaces whose connection Secret and
// NetworkPolicy are known to be current, so each is checked once per process
// (and again when the operator restarts).
var ensuredNamespaces sync.Map

// runtimePhase keeps the Agent's session pods: its identity and network
// objects, a warm pool, one pod per unclaimed wake, reaping of finished pods
// and re-waking the chats of pods that died.
func (r *AgentReconciler) runtimePhase(ctx context.Context, s *agentScope) error {
	rc := r.Runtime
	if rc == nil {
		return nil
	}
	a := s.agent
	if err := r.ensureNamespace(ctx, a.Namespace); err != nil {
		return err
	}
	for _, obj := range []client.Object{podspec.ServiceAccount(a), podspec.Role(a), podspec.RoleBinding(a)} {
		if err := r.ensureOwned(ctx, obj); err != nil {
			return err
		}
	}

	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(a.Namespace), client.MatchingLabels(podspec.SessionLabels(a))); err != nil {
		return fmt.Errorf("failed to list session pods: %w", err)
	}
	registry, err := rc.Redis.HGetAll(ctx, wake.PodsKey(a.Namespace, a.Name)).Result()
	if err != nil {
		return fmt.Errorf("failed to read the pod registry: %w", err)
	}
	live := map[string]*corev1.Pod{}
	var problem *metav1.Condition
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
			continue
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			if p.Status.Phase == corev1.PodFailed && registry[p.Name] == "" && problem == nil {
				problem = ptrTo(condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonPodFailed,
					fmt.Sprintf("session pod %s failed before serving: %s", p.Name, podFailure(p))))
			}
			if err := r.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("failed to reap pod %s: %w", p.Name, err)
			}
			continue
		}
		live[p.Name] = p
		if c := podProblem(p); c != nil && problem == nil {
			problem = c
		}
	}
	// Registry entries of pods that are gone: a busy one died mid-chat, so
	// its chat is woken again for the next runtime (which reclaims the
	// unacknowledged message and repairs the chain).
	var active, warm int32
	for name, v := range registry {
		st := parseState(v)
		if _, ok := live[name]; !ok {
			gone, err := r.podGone(ctx, a.Namespace, name)
			if err != nil {
				return err
			}
			if !gone {
				continue
			}
			if st.busy {
				if err := wake.Publish(ctx, rc.Bus, wake.Wake{Tenant: a.Namespace, Agent: a.Name, Channel: st.channel, ChatKey: st.chat}); err != nil {
					return err
				}
				log.FromContext(ctx).Info("Re-woke the chat of a dead session pod", "pod", name, "chat", st.chat)
			}
			if err := rc.Redis.HDel(ctx, wake.PodsKey(a.Namespace, a.Name), name).Err(); err != nil {
				return err
			}
			continue
		}
		if st.busy {
			active++
			if err := r.labelSession(ctx, live[name], podspec.SessionValue(st.channel, st.chat)); err != nil {
				return err
			}
		} else {
			warm++
		}
	}
	starting := int32(0)
	for name := range live {
		if _, ok := registry[name]; !ok {
			starting++
		}
	}
	lag, err := r.unclaimedWakes(ctx, a)
	if err != nil {
		return err
	}
	pool := int32(0)
	if rt := a.Spec.Runtime; rt != nil && rt.WarmPool != nil {
		pool = *rt.WarmPool
	}
	demand := lag
	if rt := a.Spec.Runtime; rt != nil && rt.MaxSessions != nil && active+demand > *rt.MaxSessions {
		demand = max(0, *rt.MaxSessions-active)
	}
	want := active + pool + demand
	have := int32(len(live))
	res := &runtimeResult{active: active, warm: warm,
		cond: condition(picobotv1alpha1.ConditionRuntimeReady, true, picobotv1alpha1.ReasonPodsReady,
			fmt.Sprintf("%d active, %d warm, %d starting", active, warm, starting))}
	if problem != nil {
		res.cond = *problem
	}
	// Without a model there is nothing a pod could answer; the gateway
	// answers wakes for it with the reason instead.
	canRun := s.model.Effective != nil && problem == nil
	if canRun {
		for ; have < want; have++ {
			if err := r.createPod(ctx, s); err != nil {
				if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
					res.cond = condition(picobotv1alpha1.ConditionRuntimeReady, false, picobotv1alpha1.ReasonQuotaExceeded, err.Error())
					break
				}
				return err
			}
		}
	}
	if len(live) > 0 || lag > 0 {
		res.requeue = rc.ResyncBusy
	}
	s.runtime = res
	return nil
}

// unclaimedWakes is the wake stream's lag for the pods' group: wakes no pod
// has read yet.
func (r *AgentReconciler) unclaimedWakes(ctx context.Context, a *picobotv1alpha1.Agent) (int32, error) {
	stream := wake.Stream(a.Namespace, a.Name)
	groups, err := r.Runtime.Redis.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return 0, nil
		}
		return 0, fmt.Errorf("failed to read wake stream: %w", err)
	}
	for _, g := range groups {
		if g.Name == wake.GroupPods {
			return int32(min(g.Lag, 1000)), nil
		}
	}
	n, err := r.Runtime.Redis.XLen(ctx, stream).Result()
	return int32(min(n, 1000)), err
}

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

func (r *AgentReconciler) createPod(ctx context.Context, s *agentScope) error {
	in := podspec.Input{Agent: s.agent, Image: r.Runtime.Image, SecretKeys: s.secretKeys, Env: r.Runtime.Env}
	p := podspec.SessionPod(in)
	p.Name, p.GenerateName = "", s.agent.Name+"-"
	if err := r.Create(ctx, p); err != nil {
		return fmt.Errorf("failed to create a session pod: %w", err)
	}
	return nil
}

// ensureNamespace writes the namespace's connection Secret and NetworkPolicy
// once per process.
func (r *AgentReconciler) ensureNamespace(ctx context.Context, ns string) error {
	if _, ok := ensuredNamespaces.Load(ns); ok {
		return nil
	}
	reader := r.Runtime.APIReader
	if reader == nil {
		reader = r.Client
	}
	want := podspec.Connection(ns, r.Runtime.Connection)
	got := &corev1.Secret{}
	switch err := reader.Get(ctx, client.ObjectKeyFromObject(want), got); {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create the connection Secret: %w", err)
		}
	case err != nil:
		return fmt.Errorf("failed to read the connection Secret: %w", err)
	case !maps.EqualFunc(got.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) }):
		got.Data = want.Data
		if err := r.Update(ctx, got); err != nil {
			return fmt.Errorf("failed to update the connection Secret: %w", err)
		}
	}
	np := podspec.NetworkPolicy(ns, r.Runtime.Network)
	cur := &networkingv1.NetworkPolicy{}
	switch err := reader.Get(ctx, client.ObjectKeyFromObject(np), cur); {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, np); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create the NetworkPolicy: %w", err)
		}
	case err != nil:
		return fmt.Errorf("failed to read the NetworkPolicy: %w", err)
	case !equality.Semantic.DeepEqual(cur.Spec, np.Spec):
		cur.Spec = np.Spec
		if err := r.Update(ctx, cur); err != nil {
			return fmt.Errorf("failed to update the NetworkPolicy: %w", err)
		}
	}
	ensuredNamespaces.Store(ns, true)
	return nil
}

// ensureOwned creates obj or brings the fields we own back to it.
func (r *AgentReconciler) ensureOwned(ctx context.Context, want client.Object) error {
	cur := want.DeepCopyObject().(client.Object)
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cur, func() error {
		switch c := cur.(type) {
		case *corev1.ServiceAccount:
			c.AutomountServiceAccountToken = want.(*corev1.ServiceAccount).AutomountServiceAccountToken
		case *rbacv1.Role:
			c.Rules = want.(*rbacv1.Role).Rules
		case *rbacv1.RoleBinding:
			c.RoleRef, c.Subjects = want.(*rbacv1.RoleBinding).RoleRef, want.(*rbacv1.RoleBinding).Subjects
		}
		c := cur
		c.SetLabels(want.GetLabels())
		c.SetOwnerReferences(want.GetOwnerReferences())
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to apply %T %s: %w", want, want.GetName(), err)
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

func ptrTo[T any](v T) *T { return &v }

// secretKeysOf lists the Secret keys a session pod of a needs in its
// environment: the model chain's keys (including the namespace default's)
// and the MCP servers' secretKeyRefs.
func secretKeysOf(a *picobotv1alpha1.Agent, defaults *corev1.ConfigMap) []corev1.SecretKeySelector {
	var out []corev1.SecretKeySelector
	if m := a.Spec.Model; m != nil {
		for _, ref := range append([]picobotv1alpha1.ModelRef{m.ModelRef}, m.Fallbacks...) {
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
	sort.Slice(out, func(i, j int) bool { return out[i].Name+"/"+out[i].Key < out[j].Name+"/"+out[j].Key })
	return out
}

// wakeNotices feeds every wake to the agent controller, so a wake no warm pod
// claims gets a pod at once rather than at the next resync. It runs on the
// leader only, like the controller.
func wakeNotices(b bus.Bus, out chan<- event.TypedGenericEvent[*picobotv1alpha1.Agent]) manager.RunnableFunc {
	return func(ctx context.Context) error {
		l := log.FromContext(ctx).WithName("wakes")
		consumer := "operator"
		for ctx.Err() == nil {
			msgs, err := b.Fetch(ctx, wake.Notices, wake.GroupOperator, consumer, bus.FetchOptions{Count: 100, Block: 5 * time.Second})
			if err != nil {
				if ctx.Err() != nil {
					return nil //nolint:nilerr // shutting down is not a failure
				}
				l.Error(err, "Failed to read wake notices; retrying")
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			seqs := make([]string, 0, len(msgs))
			for _, m := range msgs {
				seqs = append(seqs, m.Seq)
				var w wake.Wake
				if json.Unmarshal(m.Payload, &w) != nil || w.Agent == "" {
					continue
				}
				a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: w.Tenant, Name: w.Agent}}
				select {
				case out <- event.TypedGenericEvent[*picobotv1alpha1.Agent]{Object: a}:
				case <-ctx.Done():
					return nil
				}
			}
			if len(seqs) > 0 {
				if err := b.Ack(ctx, wake.Notices, wake.GroupOperator, seqs...); err != nil {
					l.Error(err, "Failed to acknowledge wake notices")
				}
			}
		}
		return nil
	}
}
