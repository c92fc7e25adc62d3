package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/cluster"
	"github.com/picobot/picobot/runtime/cluster/published"
	"github.com/picobot/picobot/test/controlplane"
)

// TestGatewayChannelsFromPublishedCopies runs the gateway's channel set-up
// on a real API server: an Agent's webhook channel gets its credentials
// from the copy the operator publishes in the gateway's namespace (written
// here as the operator writes it), follows the copy when it arrives late or
// changes, and a Secret of the tenant's own namespace, or a copy labelled
// for another tenant, gives nothing.
func TestGatewayChannelsFromPublishedCopies(t *testing.T) {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	t.Cleanup(func() { _ = env.Stop() })
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k8s, err := client.New(env.Config, client.Options{Scheme: cluster.NewScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	const gw, tenant = "gw-system", "team-a"
	for _, ns := range []string{gw, tenant, "team-b"} {
		g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}

	agents, err := gatewayCache(env.Config, gw)
	g.Expect(err).NotTo(HaveOccurred())
	channels := channel.NewManager(channel.Options{Log: slog.Default()})
	g.Expect(followAgentChannels(ctx, agents, gw, channels, slog.Default())).To(Succeed())
	done := make(chan struct{})
	go func() { _ = agents.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	g.Expect(agents.WaitForCacheSync(ctx)).To(BeTrue())

	creds := func(ns, name, secret string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string][]byte{channel.KeyWebhookSigningSecret: []byte(secret)}}
	}
	// The tenant's own Secret is there, and a copy made for team-b under
	// team-a's name: neither counts.
	g.Expect(k8s.Create(ctx, creds(tenant, "hook", "s1"))).To(Succeed())
	forged := published.ChannelCredentials(gw, "team-b", creds(tenant, "hook", "forged"))
	forged.Name = published.ChannelCredentialsName(tenant, "hook")
	g.Expect(k8s.Create(ctx, forged)).To(Succeed())
	agent := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "helper"},
		Spec: picobotv1alpha1.AgentSpec{Instructions: "test",
			Channels: []picobotv1alpha1.Channel{{Type: channel.TypeWebhook, SecretRef: &corev1.LocalObjectReference{Name: "hook"}}}}}
	g.Expect(k8s.Create(ctx, agent)).To(Succeed())
	ready := func() bool {
		st := channels.Status(tenant, "helper")
		return len(st) == 1 && st[0].Ready
	}
	g.Eventually(func() []channel.Status { return channels.Status(tenant, "helper") }).WithTimeout(30 * time.Second).Should(HaveLen(1))
	g.Consistently(ready).WithTimeout(2 * time.Second).Should(BeFalse())

	// The operator publishes the copy: the channel comes up.
	g.Expect(k8s.Delete(ctx, forged)).To(Succeed())
	g.Expect(k8s.Create(ctx, published.ChannelCredentials(gw, tenant, creds(tenant, "hook", "s1")))).To(Succeed())
	g.Eventually(ready).WithTimeout(30 * time.Second).Should(BeTrue())

	// The copy goes (no channel names it, or its Secret was deleted): the
	// channel goes down.
	g.Expect(k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gw, Name: published.ChannelCredentialsName(tenant, "hook")}})).To(Succeed())
	g.Eventually(ready).WithTimeout(30 * time.Second).Should(BeFalse())
}
