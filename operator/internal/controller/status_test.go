package controller

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
	"github.com/picobot/picobot/runtime/cluster/published"
)

func keyRef(name string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "apiKey"}
}

func lookupOf(secrets ...*corev1.Secret) agentspec.SecretLookup {
	return func(name string) *corev1.Secret {
		for _, s := range secrets {
			if s.Name == name {
				return s
			}
		}
		return nil
	}
}

func TestResolveModel(t *testing.T) {
	withKey := secret("ns", "ok", "apiKey")
	noKey := secret("ns", "nokey", "other")
	primary := picobotv1alpha1.ModelRef{Provider: "openai", Model: "gpt-5.2", APIKeySecretRef: keyRef("ok")}
	cases := []struct {
		name     string
		spec     *picobotv1alpha1.ModelSpec
		defaults *corev1.ConfigMap
		reason   string
		source   picobotv1alpha1.ModelSource // "" = none
		model    string
		window   int32
		message  string
	}{
		{name: "spec with key", spec: &picobotv1alpha1.ModelSpec{ModelRef: primary, ContextWindow: ptr(int32(64000))},
			reason: picobotv1alpha1.ReasonResolvedFromSpec, source: picobotv1alpha1.ModelSourceSpec, model: "gpt-5.2", window: 64000,
			message: "Using openai/gpt-5.2 from spec.model"},
		{name: "spec without key ref needs no secret", spec: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "local"}},
			reason: picobotv1alpha1.ReasonResolvedFromSpec, source: picobotv1alpha1.ModelSourceSpec, model: "local", window: 128000,
			message: "Using openai/local from spec.model"},
		{name: "secret missing, no fallback", spec: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("gone")}},
			reason: picobotv1alpha1.ReasonSecretNotFound, message: `No usable model: spec.model: Secret "gone" (API key of openai/m) not found`},
		{name: "key missing", spec: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "anthropic", Model: "c", APIKeySecretRef: keyRef("nokey")}},
			reason: picobotv1alpha1.ReasonSecretKeyNotFound, message: `Secret "nokey" has no key "apiKey" (API key of anthropic/c)`},
		{name: "first usable fallback", spec: &picobotv1alpha1.ModelSpec{
			ModelRef:  picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", APIKeySecretRef: keyRef("gone")},
			Fallbacks: []picobotv1alpha1.ModelRef{{Provider: "openai", Model: "f0", APIKeySecretRef: keyRef("nokey")}, {Provider: "anthropic", Model: "f1", APIKeySecretRef: keyRef("ok")}, primary}},
			reason: picobotv1alpha1.ReasonResolvedFromFallback, source: picobotv1alpha1.ModelSourceFallback, model: "f1", window: 128000,
			message: `Using fallback 1 anthropic/f1 because spec.model: Secret "gone" (API key of openai/m) not found; fallbacks[0]: Secret "nokey" has no key "apiKey" (API key of openai/f0)`},
		{name: "no model anywhere", reason: picobotv1alpha1.ReasonNoModelConfigured, message: "spec.model is not set"},
		{name: "namespace default", defaults: &corev1.ConfigMap{Data: map[string]string{"provider": "openai", "model": "d", "apiKeySecret": "ok"}},
			reason: picobotv1alpha1.ReasonResolvedFromNamespaceDefault, source: picobotv1alpha1.ModelSourceNamespaceDefault, model: "d", window: 128000,
			message: `Using openai/d from ConfigMap "picobot-defaults"`},
		{name: "namespace default custom key", defaults: &corev1.ConfigMap{Data: map[string]string{"provider": "openai", "model": "d", "apiKeySecret": "nokey", "apiKeySecretKey": "other"}},
			reason: picobotv1alpha1.ReasonResolvedFromNamespaceDefault, source: picobotv1alpha1.ModelSourceNamespaceDefault, model: "d", window: 128000,
			message: `Using openai/d from ConfigMap "picobot-defaults"`},
		{name: "namespace default missing model", defaults: &corev1.ConfigMap{Data: map[string]string{"provider": "openai"}},
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: "key model is empty"},
		{name: "namespace default bad window", defaults: &corev1.ConfigMap{Data: map[string]string{"provider": "openai", "model": "d", "contextWindow": "lots"}},
			reason: picobotv1alpha1.ReasonInvalidNamespaceDefault, message: `contextWindow "lots" is not a whole number of at least 1024`},
		{name: "namespace default secret missing", defaults: &corev1.ConfigMap{Data: map[string]string{"provider": "anthropic", "model": "d", "apiKeySecret": "gone"}},
			reason: picobotv1alpha1.ReasonSecretNotFound, message: `Namespace default: Secret "gone" (API key of anthropic/d) not found`},
		{name: "spec wins over namespace default", spec: &picobotv1alpha1.ModelSpec{ModelRef: primary},
			defaults: &corev1.ConfigMap{Data: map[string]string{"provider": "openai", "model": "d"}},
			reason:   picobotv1alpha1.ReasonResolvedFromSpec, source: picobotv1alpha1.ModelSourceSpec, model: "gpt-5.2", window: 128000,
			message: "Using openai/gpt-5.2 from spec.model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := agentspec.ResolveModel(tc.spec, tc.defaults, lookupOf(withKey, noKey))
			g.Expect(r.Reason).To(Equal(tc.reason))
			g.Expect(r.Message).To(ContainSubstring(tc.message))
			c := modelCondition(r)
			g.Expect(c.Type).To(Equal(picobotv1alpha1.ConditionModelResolved))
			if tc.source == "" {
				g.Expect(r.Effective).To(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				return
			}
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(r.Effective.Source).To(Equal(tc.source))
			g.Expect(r.Effective.Model).To(Equal(tc.model))
			g.Expect(r.Effective.ContextWindow).To(Equal(tc.window))
		})
	}
}

func TestReadySummary(t *testing.T) {
	g := NewWithT(t)
	ok := condition("A", true, "Fine", "a fine")
	bad1 := condition("B", false, "Broken", "b broken")
	bad2 := condition("C", false, "Worse", "c worse")

	r := readySummary([]metav1.Condition{ok, ok})
	g.Expect(r.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(r.Reason).To(Equal(picobotv1alpha1.ReasonReady))

	r = readySummary([]metav1.Condition{ok, bad1, bad2})
	g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(r.Reason).To(Equal("Broken"), "the first failing condition names the reason")
	g.Expect(r.Message).To(Equal("B: b broken; C: c worse"))
}

func TestToolsAndReferencesConditions(t *testing.T) {
	g := NewWithT(t)
	c := toolsCondition(nil, nil, 3)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonResolved))
	c = toolsCondition(nil, []string{"w1", "w2"}, 3)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonResolvedWithWarnings))
	g.Expect(c.Message).To(Equal("3 tools; w1; w2"))
	c = toolsCondition(errors.New("bad"), nil, 0)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonInvalidToolPolicy))

	c = referencesCondition([]string{`Agent "a"`}, []string{"self"})
	g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonInvalidReference))
	g.Expect(c.Message).To(Equal(`self; Agent "a"`))
	c = referencesCondition([]string{`Agent "a"`, `Secret "s"`}, nil)
	g.Expect(c.Reason).To(Equal(picobotv1alpha1.ReasonReferenceNotFound))
	g.Expect(c.Message).To(Equal(`Not found: Agent "a", Secret "s"`))
}

func TestSetConditionsTransitions(t *testing.T) {
	g := NewWithT(t)
	var list []metav1.Condition
	changed := setConditions(&list, 1, condition("A", true, "Ok", "m"), condition("B", false, "Bad", "m"))
	g.Expect(changed).To(HaveLen(1), "a condition appearing healthy is not news")
	g.Expect(changed[0].Type).To(Equal("B"))
	g.Expect(list[0].ObservedGeneration).To(Equal(int64(1)))
	t0 := list[0].LastTransitionTime

	changed = setConditions(&list, 2, condition("A", true, "Ok", "new message"), condition("B", true, "Fixed", "m"))
	g.Expect(changed).To(HaveLen(1))
	g.Expect(changed[0].Type).To(Equal("B"))
	g.Expect(list[0].LastTransitionTime).To(Equal(t0), "status unchanged keeps its transition time")
	g.Expect(list[0].ObservedGeneration).To(Equal(int64(2)))
	g.Expect(list[0].Message).To(Equal("new message"))
}

func TestScheduleStatusPure(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	created := metav1.NewTime(now.Add(-90 * time.Second))
	mk := func(s picobotv1alpha1.Schedule) *picobotv1alpha1.CronJob {
		return &picobotv1alpha1.CronJob{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}, Spec: picobotv1alpha1.CronJobSpec{Schedule: s}}
	}
	g := NewWithT(t)
	st := scheduleStatus(mk(picobotv1alpha1.Schedule{Every: ptr(int64(60000))}), now)
	g.Expect(st.next.Time).To(Equal(now.Add(30 * time.Second)))
	g.Expect(st.condition.Reason).To(Equal(picobotv1alpha1.ReasonScheduled))

	done := mk(picobotv1alpha1.Schedule{At: ptr(now.Add(-time.Hour).UnixMilli())})
	done.Status.LastRun = &picobotv1alpha1.CronRun{ID: "r1", ScheduledTime: metav1.NewTime(now.Add(-time.Hour)), Outcome: "ok"}
	st = scheduleStatus(done, now)
	g.Expect(st.condition.Reason).To(Equal(picobotv1alpha1.ReasonCompleted))
	g.Expect(st.condition.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(st.next).To(BeNil())

	st = scheduleStatus(mk(picobotv1alpha1.Schedule{Cron: "*/10 * * * * *"}), now.Add(3*time.Second+500*time.Millisecond))
	g.Expect(st.next.Time).To(Equal(now.Add(10 * time.Second)))
}

func TestKeysChangedPredicate(t *testing.T) {
	g := NewWithT(t)
	p := keysChanged{}
	// The predicate sees Secrets as the cache holds them (StripSecretValues).
	strip := func(s *corev1.Secret) *corev1.Secret { o, _ := StripSecretValues(s); return o.(*corev1.Secret) }
	a := secret("ns", "s", "apiKey")
	a.Data["apiKey"] = []byte("sk-1")
	a = strip(a)
	b := secret("ns", "s", "apiKey")
	b.Data["apiKey"] = []byte("rotated")
	b = strip(b)
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: a, ObjectNew: b})).To(BeFalse(), "value rotation changes no status")
	ph := secret("ns", "s", "apiKey")
	ph.Data["apiKey"] = []byte("placeholder-set-OPENAI_API_KEY")
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: strip(ph), ObjectNew: b})).To(BeTrue(), "a placeholder replaced by a key")
	c := secret("ns", "s", "apiKey", "extra")
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: a, ObjectNew: c})).To(BeTrue())
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: a, ObjectNew: secret("ns", "s", "other")})).To(BeTrue())

	dOld := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: picobotv1alpha1.NamespaceDefaultsConfigMap}, Data: map[string]string{"model": "a"}}
	dNew := dOld.DeepCopy()
	dNew.Data["model"] = "b"
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: dOld, ObjectNew: dNew})).To(BeTrue(), "defaults values matter")
	oOld := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "skills"}, Data: map[string]string{"SKILL.md": "a"}}
	oNew := oOld.DeepCopy()
	oNew.Data["SKILL.md"] = "b"
	g.Expect(p.Update(event.UpdateEvent{ObjectOld: oOld, ObjectNew: oNew})).To(BeFalse())
}

func TestCacheTransformsDropValues(t *testing.T) {
	g := NewWithT(t)
	s := secret("ns", "s", "apiKey")
	s.StringData = map[string]string{"token": "plain"}
	s.Annotations = map[string]string{lastAppliedAnnotation: `{"data":{"apiKey":"c2stdGVzdA=="}}`, "keep": "me"}
	out, err := StripSecretValues(s)
	g.Expect(err).NotTo(HaveOccurred())
	got := out.(*corev1.Secret)
	g.Expect(got.Data).To(HaveLen(2))
	g.Expect(got.Data).To(HaveKeyWithValue("apiKey", BeEmpty()))
	g.Expect(got.Data).To(HaveKeyWithValue("token", BeEmpty()))
	g.Expect(got.StringData).To(BeNil())
	g.Expect(got.Annotations).To(Equal(map[string]string{"keep": "me"}))
	g.Expect(secretKeyPresent(got, "apiKey")).To(BeTrue())

	// A placeholder is no secret and stays, so the Agent can say its key is one.
	ph := secret("ns", "demo", "openai")
	ph.Data["openai"] = []byte("placeholder-set-OPENAI_API_KEY")
	ph.StringData = map[string]string{"anthropic": "<your key>", "real": "sk-ant-x"}
	out, _ = StripSecretValues(ph)
	g.Expect(out.(*corev1.Secret).Data).To(Equal(map[string][]byte{
		"openai": []byte("placeholder-set-OPENAI_API_KEY"), "anthropic": []byte("<your key>"), "real": {}}))

	d := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: picobotv1alpha1.NamespaceDefaultsConfigMap}, Data: map[string]string{"model": "m"}}
	o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: map[string]string{"big": "xxxxxxxx"}}
	outD, _ := StripConfigMapValues(d)
	outO, _ := StripConfigMapValues(o)
	g.Expect(outD.(*corev1.ConfigMap).Data).To(HaveKeyWithValue("model", "m"))
	g.Expect(outO.(*corev1.ConfigMap).Data).To(HaveKeyWithValue("big", ""))

	// An API-key Secret keeps the SHA-256 of its token, which the operator
	// publishes for the gateway, and not the token; a second pass (transforms
	// may run twice) keeps the hash.
	k := apiKeySecret("ns", "key", "token-1", nil)
	out, _ = StripSecretValues(k)
	out, _ = StripSecretValues(out)
	g.Expect(out.(*corev1.Secret).Data).To(Equal(map[string][]byte{
		published.TokenKey: {}, published.HashDataKey: []byte(published.HashToken([]byte("token-1")))}))
	// A published index keeps its data.
	idx, err := published.KeyIndex("gw", "ns", map[string]published.Key{"key": {SHA256: published.HashToken([]byte("token-1"))}})
	g.Expect(err).NotTo(HaveOccurred())
	outI, _ := StripConfigMapValues(idx.DeepCopy())
	g.Expect(outI.(*corev1.ConfigMap).Data).To(Equal(idx.Data))
}
