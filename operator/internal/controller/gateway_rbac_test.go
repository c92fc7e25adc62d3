package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/runtime/cluster/agentsource"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/agentconfig"
)

// podClient is a client with the credentials of an Agent's session pods: a
// token the API server issues to the ServiceAccount the operator made.
func podClient(t *testing.T, ns, agent string) client.Client {
	t.Helper()
	g := NewWithT(t)
	cs := kubernetes.NewForConfigOrDie(restConfig)
	var tok *authenticationv1.TokenRequest
	g.Eventually(func() error {
		var err error
		tok, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), podspec.ServiceAccountName(agent),
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](600)}}, metav1.CreateOptions{})
		return err
	}).Should(Succeed())
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = tok.Status.Token
	c, err := client.New(cfg, client.Options{Scheme: testScheme})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// gatewayCall runs the gateway tool over src as the root agent's chat does,
// its user approving every change (the approval flow itself is tested end
// to end in runtime/embedded's TestGatewayTool).
func gatewayCall(t *testing.T, src agentconfig.Source, args string) tool.Result {
	t.Helper()
	return gatewayCallAs(t, src, args, userSays(true))
}

func gatewayCallAs(t *testing.T, src agentconfig.Source, args string, user tool.Approver) tool.Result {
	t.Helper()
	reg, err := tool.NewRegistry(agentconfig.New(agentconfig.Config{Source: src})...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return reg.Execute(context.Background(), tool.Env{SessionID: "web:c1:default", Approver: user},
		llm.ToolCall{ID: "c1", Name: agentconfig.GatewayName, Arguments: args})
}

// userSays is a chat's user who answers every approval request the same.
type userSays bool

func (u userSays) Approve(context.Context, tool.ApprovalRequest) (bool, string, error) {
	return bool(u), "the user denied it", nil
}

// TestGatewayToolRBAC: with the real credentials of a root agent's session
// pod (a ServiceAccount token, the Role the operator made) against the real
// API server, config.patch changes the pod's own Agent, the API server's
// schema refuses an invalid change, a GitOps-managed Agent is refused, and
// the API server — not our code — refuses a patch of another Agent, and any
// patch from a pod of an Agent that is not root.
func TestGatewayToolRBAC(t *testing.T) {
	ns := newRuntimeNamespace(t)
	startRuntimeManager(t, ns, nil)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
	boss := openAIAgent(ns, "boss", "openai")
	boss.Spec.Role = ptr(picobotv1alpha1.AgentRoleRoot)
	g.Expect(k8s.Create(ctx, boss)).To(Succeed())
	g.Expect(k8s.Create(ctx, openAIAgent(ns, "other", "openai"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		var r rbacv1.Role
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.ServiceAccountName("boss")}, &r)).To(Succeed())
		g.Expect(r.Rules).To(ContainElement(rbacv1.PolicyRule{APIGroups: []string{picobotv1alpha1.GroupVersion.Group}, Resources: []string{"agents"},
			ResourceNames: []string{"boss"}, Verbs: []string{"patch"}}))
	}).Should(Succeed())

	bossPod := podClient(t, ns, "boss")
	switched := 0
	src := &agentsource.Source{Kube: bossPod, Namespace: ns, Name: "boss",
		Switch: func(_ context.Context, a *picobotv1alpha1.Agent) (string, error) {
			switched++
			return a.Spec.Instructions, nil
		}}

	res := gatewayCall(t, src, `{"action":"config.patch","patch":{"instructions":"Patched by the pod."}}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("Saved and reloaded: Patched by the pod."))
	g.Expect(getAgent(g, ns, "boss").Spec.Instructions).To(Equal("Patched by the pod."))
	g.Expect(switched).To(Equal(1))

	// Without its user's yes nothing changes: denied, or no user to ask.
	res = gatewayCallAs(t, src, `{"action":"config.patch","patch":{"instructions":"Unseen."}}`, userSays(false))
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("not changed: the user denied it"))
	res = gatewayCallAs(t, src, `{"action":"config.patch","patch":{"instructions":"Unseen."}}`, nil)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("no user to ask"))
	g.Expect(getAgent(g, ns, "boss").Spec.Instructions).To(Equal("Patched by the pod."))

	// The API server's schema (with its dry run) refuses an invalid change.
	res = gatewayCall(t, src, `{"action":"config.patch","patch":{"model":{"provider":"nope"}}}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(And(ContainSubstring("not saved"), ContainSubstring("spec.model.provider")))
	g.Expect(getAgent(g, ns, "boss").Spec.Model.Provider).To(Equal(picobotv1alpha1.ProviderOpenAI))

	// Another Agent: the API server refuses the pod's patch.
	other := getAgent(g, ns, "other")
	before := other.DeepCopy()
	other.Spec.Instructions = "Hijacked."
	err := bossPod.Patch(ctx, other, client.MergeFrom(before))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	res = gatewayCall(t, &agentsource.Source{Kube: bossPod, Namespace: ns, Name: "other"},
		`{"action":"config.patch","patch":{"instructions":"Hijacked."}}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("forbidden"))
	g.Expect(getAgent(g, ns, "other").Spec.Instructions).To(Equal("You are a helpful assistant."))

	// A pod of an Agent that is not root may not patch even its own Agent.
	otherPod := podClient(t, ns, "other")
	res = gatewayCall(t, &agentsource.Source{Kube: otherPod, Namespace: ns, Name: "other"},
		`{"action":"config.patch","patch":{"instructions":"Hijacked."}}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("forbidden"))

	// GitOps-managed: refused before any request, with a message saying so.
	cur := getAgent(g, ns, "boss")
	orig := cur.DeepCopy()
	cur.Labels = map[string]string{"argocd.argoproj.io/instance": "tenant-apps"}
	g.Expect(k8s.Patch(ctx, cur, client.MergeFrom(orig))).To(Succeed())
	res = gatewayCall(t, src, `{"action":"config.apply","spec":{"instructions":"x"}}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(And(ContainSubstring("managed by Argo CD"), ContainSubstring("argocd.argoproj.io/instance=tenant-apps")))
	g.Expect(getAgent(g, ns, "boss").Spec.Instructions).To(Equal("Patched by the pod."))
}
