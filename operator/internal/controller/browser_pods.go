package controller

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/opmetrics"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// BrowserPods configures browser pods: headless Chromium behind `picobot
// browser`, one pod per BrowserProfile in use and per dialog's ephemeral
// browser, asked for by sessions through Leases (package wire).
type BrowserPods struct {
	// Image runs `picobot browser`. Empty: sessions asking for a browser
	// are told that this operator runs no browser pods.
	Image string
	// Port of the DevTools proxy (wire.DefaultPort when 0).
	Port int32
	// Storage keeps profiles stored in S3; nil when no bucket is configured
	// (such profiles then cannot run).
	Storage ProfileStorage
	// StorageEndpoint is the S3 endpoint browser pods save to and restore
	// from, for their NetworkPolicy.
	StorageEndpoint string
	// Network holds the system namespace and private ranges (as for session
	// pods).
	Network podspec.Network
	// Resources of the browser container (podspec.DefaultBrowserResources).
	Resources *corev1.ResourceRequirements
	// EphemeralIdle is how long an ephemeral browser may stay idle at most
	// (and by default): 1h. A Lease may ask for less.
	EphemeralIdle time.Duration
	// APIReader reads past the cache: Secret values (the cache keeps key
	// names only), pods created moments ago, NetworkPolicies and PVCs
	// (which the operator does not cache).
	APIReader client.Reader
	// Quota are the default caps of tenants (TenantQuota fields unset):
	// maxBrowserPods.
	Quota QuotaDefaults
	// Metrics records browser pods; nil records nothing.
	Metrics *opmetrics.Metrics
}

// BrowserPodsFromRuntime derives the browser pod settings from the session
// runtime's: the image, the network and the S3 connection (for profile
// archives). It returns nil without a runtime: no session pods, no browsers.
func BrowserPodsFromRuntime(ctx context.Context, rc *RuntimeConfig) (*BrowserPods, error) {
	if rc == nil {
		return nil, nil
	}
	storage, err := NewS3ProfileStorage(ctx, rc.Connection)
	if err != nil {
		return nil, err
	}
	return &BrowserPods{Image: rc.BrowserImage, Storage: storage, StorageEndpoint: rc.Connection["PICOBOT_S3_ENDPOINT"],
		Network: rc.Network, APIReader: rc.APIReader, Metrics: rc.Metrics}, nil
}

// recycleMargin replaces an S3 profile's pod this long before its presigned
// URLs expire, so it can always save.
const recycleMargin = 12 * time.Hour

// browserKeeper runs the pods of browsers; both browser reconcilers share it.
type browserKeeper struct {
	client.Client
	cfg   BrowserPods
	clock clock.PassiveClock
	// egress remembers namespaces whose session egress policy is in place.
	egress sync.Map
	// podLocks serialise the capped browser pod creations of a namespace.
	podLocks namespaceLocks

	// seen remembers, per browser, the pod whose start was timed and the
	// Lease holder last counted as a request, so each is recorded once
	// (bounded by the browsers running).
	seenMu sync.Mutex
	seen   map[client.ObjectKey]browserSeen
}

type browserSeen struct {
	pod types.UID
	// holders are the session pods counted since the browser last ran
	// no pod: several sessions may share a profile's browser and renew
	// its Lease in turn.
	holders map[string]struct{}
}

// maxHolders bounds browserSeen.holders; past it the set starts again.
const maxHolders = 64

// browserCapRetry is how often a browser held back by maxBrowserPods tries
// again: another browser stopping sends it no event.
const browserCapRetry = 5 * time.Second

// underCap checks the tenant's maxBrowserPods before a browser pod of ns is
// created, counting on the API server under the namespace's lock, which
// the caller holds until it has created the pod (unlock). A problem says
// the cap is reached.
func (k *browserKeeper) underCap(ctx context.Context, ns, name string) (unlock func(), p *browserProblem, err error) {
	caps, err := tenantCapsOf(ctx, k.Client, k.cfg.Quota, ns)
	if err != nil || caps.browserPods == nil {
		return func() {}, nil, err
	}
	unlock = k.podLocks.lock(ns)
	n, err := countBrowserPods(ctx, k.cfg.APIReader, ns)
	if err != nil {
		unlock()
		return func() {}, nil, err
	}
	if n >= *caps.browserPods {
		unlock()
		return func() {}, &browserProblem{picobotv1alpha1.ReasonBrowserPodLimit, fmt.Sprintf(
			"no browser pod for %s now: the tenant's maxBrowserPods is %d and %d run in the namespace; it starts when one stops", name, *caps.browserPods, n)}, nil
	}
	return unlock, nil, nil
}

func newBrowserKeeper(c client.Client, cfg BrowserPods, clk clock.PassiveClock) *browserKeeper {
	if cfg.Port == 0 {
		cfg.Port = wire.DefaultPort
	}
	if cfg.EphemeralIdle <= 0 {
		cfg.EphemeralIdle = time.Hour
	}
	if cfg.APIReader == nil {
		cfg.APIReader = c
	}
	return &browserKeeper{Client: c, cfg: cfg, clock: clk, seen: map[client.ObjectKey]browserSeen{}}
}

// browserWant is what one browser should be.
type browserWant struct {
	// in builds the pod; in.Agents may connect and get its address.
	in podspec.BrowserInput
	// archive is the S3 key of an s3 profile's archive.
	archive string
	// wanted: a session holds the browser; until is when it goes idle.
	wanted  bool
	renewed time.Time
	until   time.Time
	// blocked says why the browser must not run although it is wanted.
	blocked *browserProblem
	// noStart: the request may keep a running pod but not start one (it
	// came from an agent that may not use the browser).
	noStart bool
	// notify are the agents told why a browser cannot run: in.Agents and
	// the one that asked.
	notify []string
	// holder is the session pod holding the Lease (the last to ask).
	holder string
}

// browserState is what sync observed and did.
type browserState struct {
	pod     *corev1.Pod
	ready   bool
	problem *browserProblem
	requeue time.Duration
}

// sync brings one browser's pod to what w says: started when wanted and
// missing, its address and token published to the agents' endpoints
// Secrets once it serves, deleted (after saving its profile) when idle.
func (k *browserKeeper) sync(ctx context.Context, w browserWant) (browserState, error) {
	st, err := k.syncPod(ctx, w)
	k.observe(w, st)
	return st, err
}

// browserKind is a browser's kind label: a dialog's or a profile's.
func browserKind(name string) string {
	if strings.HasPrefix(name, ephemeralPrefix) {
		return opmetrics.BrowserEphemeral
	}
	return opmetrics.BrowserProfile
}

// observe records what sync found: the browser's pod state, a ready pod's
// start latency (once per pod) and a session pod's request (once per
// holder while the browser runs; an operator restart counts the current
// holder again).
func (k *browserKeeper) observe(w browserWant, st browserState) {
	m := k.cfg.Metrics
	if m == nil {
		return
	}
	ns, name := w.in.Namespace, w.in.Name
	kind := browserKind(name)
	state := ""
	switch {
	case st.ready:
		state = opmetrics.BrowserReady
	case st.pod != nil && st.problem == nil:
		state = opmetrics.BrowserStarting
	}
	m.BrowserState(ns, name, kind, state)
	key := client.ObjectKey{Namespace: ns, Name: name}
	k.seenMu.Lock()
	defer k.seenMu.Unlock()
	seen := k.seen[key]
	if st.pod == nil && !w.wanted {
		seen.holders = nil
	}
	if _, counted := seen.holders[w.holder]; w.wanted && w.blocked == nil && !w.noStart && w.holder != "" && !counted {
		m.BrowserRequested(ns, kind, st.ready && seen.pod == st.pod.UID)
		if seen.holders == nil || len(seen.holders) >= maxHolders {
			seen.holders = map[string]struct{}{}
		}
		seen.holders[w.holder] = struct{}{}
	}
	if st.ready && seen.pod != st.pod.UID {
		if up := podReadySince(st.pod); !up.IsZero() {
			m.BrowserStarted(ns, kind, up.Sub(st.pod.CreationTimestamp.Time))
		}
		seen.pod = st.pod.UID
	}
	k.seen[key] = seen
}

// podReadySince is when the pod last became ready (zero when it is not).
func podReadySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// forget drops what observe remembers of a removed browser.
func (k *browserKeeper) forget(ns, name string) {
	k.cfg.Metrics.BrowserState(ns, name, browserKind(name), "")
	k.seenMu.Lock()
	delete(k.seen, client.ObjectKey{Namespace: ns, Name: name})
	k.seenMu.Unlock()
}

// syncPod is sync's work, before observe records it.
func (k *browserKeeper) syncPod(ctx context.Context, w browserWant) (browserState, error) {
	ns, name := w.in.Namespace, w.in.Name
	live, failed, stopping, err := k.pods(ctx, k.Client, ns, name)
	if err != nil {
		return browserState{}, err
	}
	var st browserState
	if !w.wanted || w.blocked != nil {
		if err := k.deletePods(ctx, append(live, failed...)); err != nil {
			return st, err
		}
		if w.wanted {
			st.problem = w.blocked
			return st, k.publishError(ctx, w, w.blocked)
		}
		return st, k.unpublish(ctx, ns, name, nil)
	}
	if err := k.unpublish(ctx, ns, name, w.notify); err != nil {
		return st, err
	}
	st.requeue = max(w.until.Sub(k.clock.Now()), time.Second)
	// A failure after the session last asked stays on record (no restart
	// loop); the session's next request starts a new pod.
	if len(live) == 0 && len(failed) > 0 && !failedAt(failed[0]).Before(w.renewed.Truncate(time.Second)) {
		st.problem = browserPodProblem(failed[0])
		return st, k.publishError(ctx, w, st.problem)
	}
	if err := k.deletePods(ctx, failed); err != nil {
		return st, err
	}
	if len(live) == 0 {
		// The cache may not have seen a pod created moments ago.
		if live, _, stopping, err = k.pods(ctx, k.cfg.APIReader, ns, name); err != nil {
			return st, err
		}
	}
	if len(live) == 0 && stopping > 0 && w.in.Persistence != nil {
		// A profile's previous pod is still saving it: start after it is
		// gone (its deletion is an event), or it would restore old data.
		return st, nil
	}
	if len(live) == 0 && w.noStart {
		return st, nil
	}
	if len(live) == 0 {
		st.pod, st.problem, err = k.start(ctx, w)
		if st.problem != nil {
			if st.problem.reason == picobotv1alpha1.ReasonBrowserPodLimit {
				st.requeue = min(st.requeue, browserCapRetry)
			}
			return st, k.publishError(ctx, w, st.problem)
		}
		return st, err
	}
	if err := k.deletePods(ctx, live[1:]); err != nil {
		return st, err
	}
	return k.serveLive(ctx, w, st, live[0])
}

// serveLive keeps the browser's live pod: replaced when its settings
// changed or (S3 storage) before its presigned URLs expire, its problem
// reported, and once ready its address and token published to the agents.
func (k *browserKeeper) serveLive(ctx context.Context, w browserWant, st browserState, pod *corev1.Pod) (browserState, error) {
	ns, name := w.in.Namespace, w.in.Name
	st.pod = pod
	if want := podspec.BrowserPod(k.input(w.in)); st.pod.Annotations[podspec.AnnotationBrowserSpec] != want.Annotations[podspec.AnnotationBrowserSpec] {
		// Who may connect, the domains or the image changed: a new pod
		// (with a new token) replaces this one once it has saved.
		log.FromContext(ctx).Info("Replacing a browser pod whose settings changed", "pod", st.pod.Name)
		return browserState{requeue: time.Second}, k.deletePods(ctx, []*corev1.Pod{pod})
	}
	if w.in.Storage() == picobotv1alpha1.StorageS3 {
		// Replace the pod before its presigned URLs expire (it saves first).
		left := st.pod.CreationTimestamp.Add(maxPresignTTL - recycleMargin).Sub(k.clock.Now())
		if left <= 0 {
			log.FromContext(ctx).Info("Replacing a browser pod before its storage URLs expire", "pod", st.pod.Name)
			return browserState{requeue: time.Second}, k.deletePods(ctx, []*corev1.Pod{pod})
		}
		st.requeue = min(st.requeue, left)
	}
	if st.problem = browserPodProblem(st.pod); st.problem != nil {
		return st, k.publishError(ctx, w, st.problem)
	}
	if !browserPodReady(st.pod) {
		return st, nil
	}
	secret := &corev1.Secret{}
	if err := k.cfg.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
		return st, fmt.Errorf("failed to read the token of browser %s: %w", name, err)
	}
	st.ready = true
	addr := "http://" + net.JoinHostPort(st.pod.Status.PodIP, strconv.Itoa(int(k.cfg.Port)))
	return st, k.publish(ctx, ns, w.in.Agents, map[string]string{
		wire.URLKey(name): addr, wire.TokenKey(name): string(secret.Data[wire.SecretKeyToken]), wire.ErrorKey(name): ""})
}

// pods lists a browser's pods: live ones oldest first, failed ones newest
// first, and counts those terminating. Succeeded pods (a clean exit) are
// deleted on the way.
func (k *browserKeeper) pods(ctx context.Context, r client.Reader, ns, name string) (live, failed []*corev1.Pod, stopping int, err error) {
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(podspec.BrowserSelector(name))); err != nil {
		return nil, nil, 0, fmt.Errorf("failed to list the pods of browser %s: %w", name, err)
	}
	var done []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
			stopping++
		case p.Status.Phase == corev1.PodFailed:
			failed = append(failed, p)
		case p.Status.Phase == corev1.PodSucceeded:
			done = append(done, p)
		default:
			live = append(live, p)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].CreationTimestamp.Before(&live[j].CreationTimestamp) })
	sort.Slice(failed, func(i, j int) bool { return failedAt(failed[i]).After(failedAt(failed[j])) })
	return live, failed, stopping, k.deletePods(ctx, done)
}

func failedAt(p *corev1.Pod) time.Time {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return t.FinishedAt.Time
		}
	}
	return p.CreationTimestamp.Time
}

// deletePods deletes pods gracefully: `picobot browser` saves the profile
// on SIGTERM.
func (k *browserKeeper) deletePods(ctx context.Context, pods []*corev1.Pod) error {
	for _, p := range pods {
		if err := k.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("failed to delete browser pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// start creates a browser's Secret (a new token, and the S3 URLs of an s3
// profile), its NetworkPolicy, the PVC of a pvc profile, and its pod.
func (k *browserKeeper) start(ctx context.Context, w browserWant) (*corev1.Pod, *browserProblem, error) {
	in := k.input(w.in)
	unlock, problem, err := k.underCap(ctx, in.Namespace, in.Name)
	if err != nil || problem != nil {
		return nil, problem, err
	}
	defer unlock()
	token, err := newBrowserToken()
	if err != nil {
		return nil, nil, err
	}
	data := podspec.BrowserSecretData{Token: token}
	var egress []networkingv1.NetworkPolicyEgressRule
	if in.Storage() == picobotv1alpha1.StorageS3 {
		if data.RestoreURL, err = k.cfg.Storage.PresignGet(ctx, w.archive, maxPresignTTL); err != nil {
			return nil, nil, err
		}
		if data.SaveURL, err = k.cfg.Storage.PresignPut(ctx, w.archive, maxPresignTTL); err != nil {
			return nil, nil, err
		}
		egress = podspec.StorageEgress(k.cfg.StorageEndpoint, k.cfg.Network.SystemNamespace, k.cfg.Network.PrivateCIDRs)
	}
	objs := []client.Object{podspec.BrowserSecret(in, data), podspec.BrowserNetworkPolicy(in, k.cfg.Network, egress)}
	if _, ok := k.egress.Load(in.Namespace); !ok {
		objs = append(objs, podspec.SessionBrowserEgress(in.Namespace, k.cfg.Port))
	}
	if in.Storage() == picobotv1alpha1.StoragePVC {
		objs = append(objs, podspec.BrowserPVC(in))
	}
	for _, o := range objs {
		if err := k.apply(ctx, o); err != nil {
			return nil, nil, err
		}
	}
	k.egress.Store(in.Namespace, true)
	if err := k.publish(ctx, in.Namespace, w.notify, map[string]string{wire.ErrorKey(in.Name): ""}); err != nil {
		return nil, nil, err
	}
	pod := podspec.BrowserPod(in)
	if err := k.Create(ctx, pod); err != nil {
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
			return nil, &browserProblem{picobotv1alpha1.ReasonQuotaExceeded, fmt.Sprintf("no browser pod for %s: %v", in.Name, err)}, nil
		}
		return nil, nil, fmt.Errorf("failed to create a pod for browser %s: %w", in.Name, err)
	}
	log.FromContext(ctx).Info("Started a browser pod", "pod", pod.Name, "browser", in.Name)
	return pod, nil, nil
}

// input completes a browser's input with the operator's settings.
func (k *browserKeeper) input(in podspec.BrowserInput) podspec.BrowserInput {
	in.Image, in.Port = k.cfg.Image, k.cfg.Port
	if in.Resources == nil {
		in.Resources = k.cfg.Resources
	}
	return in
}

func newBrowserToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to make a browser token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// apply creates want or brings back the fields the operator owns. It reads
// past the cache: the operator caches neither NetworkPolicies nor PVCs, and
// cached Secrets have no values.
func (k *browserKeeper) apply(ctx context.Context, want client.Object) error {
	cur := want.DeepCopyObject().(client.Object)
	err := k.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(want), cur)
	if apierrors.IsNotFound(err) {
		if err := k.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create %T %s: %w", want, want.GetName(), err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read %T %s: %w", want, want.GetName(), err)
	}
	same := maps.Equal(cur.GetLabels(), want.GetLabels()) && equality.Semantic.DeepEqual(cur.GetOwnerReferences(), want.GetOwnerReferences())
	switch c := cur.(type) {
	case *corev1.Secret:
		w := want.(*corev1.Secret)
		same = same && equality.Semantic.DeepEqual(c.Data, w.Data)
		c.Data = w.Data
	case *networkingv1.NetworkPolicy:
		w := want.(*networkingv1.NetworkPolicy)
		same = same && equality.Semantic.DeepEqual(c.Spec, w.Spec)
		c.Spec = w.Spec
	case *corev1.PersistentVolumeClaim:
		return nil // a claim's spec is immutable; it stays as created
	}
	if same {
		return nil
	}
	cur.SetLabels(want.GetLabels())
	cur.SetOwnerReferences(want.GetOwnerReferences())
	if err := k.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to update %T %s: %w", want, want.GetName(), err)
	}
	return nil
}

// publishError tells the waiting sessions why their browser cannot run.
func (k *browserKeeper) publishError(ctx context.Context, w browserWant, p *browserProblem) error {
	return k.publish(ctx, w.in.Namespace, w.notify, map[string]string{wire.ErrorKey(w.in.Name): wire.FormatError(w.renewed, p.message),
		wire.URLKey(w.in.Name): "", wire.TokenKey(w.in.Name): ""})
}

// publish sets (or, for "", removes) keys of the agents' endpoints Secrets,
// creating them as needed; Secrets already holding the values are not
// written.
func (k *browserKeeper) publish(ctx context.Context, ns string, agents []string, values map[string]string) error {
	for _, agent := range agents {
		a := &picobotv1alpha1.Agent{}
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: agent}, a); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("failed to read agent %s: %w", agent, err)
		}
		want := podspec.BrowserEndpoints(a)
		cur := &corev1.Secret{}
		err := k.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(want), cur)
		if apierrors.IsNotFound(err) {
			want.Data = map[string][]byte{}
			for key, v := range values {
				if v != "" {
					want.Data[key] = []byte(v)
				}
			}
			if len(want.Data) == 0 {
				continue
			}
			if err := k.Create(ctx, want); err == nil || !apierrors.IsAlreadyExists(err) {
				if err != nil {
					return fmt.Errorf("failed to create browser endpoints Secret %s: %w", want.Name, err)
				}
				continue
			}
			err = k.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(want), cur)
		}
		if err != nil {
			return fmt.Errorf("failed to read browser endpoints Secret %s: %w", want.Name, err)
		}
		before := cur.DeepCopy()
		if cur.Data == nil {
			cur.Data = map[string][]byte{}
		}
		for key, v := range values {
			if old, ok := cur.Data[key]; v == "" && ok {
				delete(cur.Data, key)
			} else if v != "" && string(old) != v {
				cur.Data[key] = []byte(v)
			}
		}
		if equality.Semantic.DeepEqual(before.Data, cur.Data) {
			continue
		}
		if err := k.Patch(ctx, cur, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("failed to publish browser endpoints in Secret %s: %w", want.Name, err)
		}
	}
	return nil
}

// unpublish removes a browser's keys from the endpoints Secrets of every
// agent not in keep. It works on cached Secrets: their key names are kept.
func (k *browserKeeper) unpublish(ctx context.Context, ns, name string, keep []string) error {
	var list corev1.SecretList
	if err := k.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentBrowser},
		client.HasLabels{picobotv1alpha1.LabelAgent}); err != nil {
		return fmt.Errorf("failed to list browser endpoints Secrets: %w", err)
	}
	keys := []string{wire.URLKey(name), wire.TokenKey(name), wire.ErrorKey(name)}
	for i := range list.Items {
		s := &list.Items[i]
		if slices.ContainsFunc(keep, func(a string) bool { return podspec.LabelValue(a) == s.Labels[picobotv1alpha1.LabelAgent] }) {
			continue
		}
		before := s.DeepCopy()
		for _, key := range keys {
			delete(s.Data, key)
		}
		if len(before.Data) == len(s.Data) {
			continue
		}
		if err := k.Patch(ctx, s, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to remove browser %s from Secret %s: %w", name, s.Name, err)
		}
	}
	return nil
}

// remove deletes a browser's pods, Secret and NetworkPolicy and its
// published keys: an ephemeral browser whose dialog is done, or a profile
// being deleted. Pods still terminating make it report false.
func (k *browserKeeper) remove(ctx context.Context, ns, name string) (gone bool, err error) {
	var list corev1.PodList
	if err := k.cfg.APIReader.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(podspec.BrowserSelector(name))); err != nil {
		return false, fmt.Errorf("failed to list the pods of browser %s: %w", name, err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			pods = append(pods, &list.Items[i])
		}
	}
	if err := k.deletePods(ctx, pods); err != nil {
		return false, err
	}
	var errs []error
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
	} {
		if err := k.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("failed to delete %T %s: %w", o, name, err))
		}
	}
	errs = append(errs, k.unpublish(ctx, ns, name, nil))
	k.forget(ns, name)
	return len(list.Items) == 0, errors.Join(errs...)
}

// leaseHolder is the session pod holding a browser Lease.
func leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaseRenewed is when a session last renewed a browser Lease.
func leaseRenewed(l *coordinationv1.Lease) time.Time {
	switch {
	case l.Spec.RenewTime != nil:
		return l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		return l.Spec.AcquireTime.Time
	}
	return l.CreationTimestamp.Time
}
