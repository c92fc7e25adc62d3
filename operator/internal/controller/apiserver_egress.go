package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/picobot/picobot/operator/internal/podspec"
)

// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list

// apiServerCheck is how often the API server's addresses are read again: a
// control plane replaced node by node changes them, and the session pods'
// NetworkPolicy must follow or new pods cannot read their Agent.
const apiServerCheck = 30 * time.Second

// apiServerEgress reads where the API server is, for the session pods'
// NetworkPolicy: the `kubernetes` Service's cluster IP and port, and the
// addresses and ports of its EndpointSlices. A policy engine judges a
// connection by the address after the Service's translation (the endpoint,
// often a node address on 6443, inside the private ranges the internet rule
// leaves out), some by the Service's address before it; both are listed. It
// returns nothing, not an error, when the operator may not read them (RBAC
// confined to watched namespaces): then --service-cidrs must name them.
func apiServerEgress(ctx context.Context, r client.Reader) (podspec.APIServer, error) {
	var out podspec.APIServer
	var svc corev1.Service
	err := r.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &svc)
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		return out, nil
	case err != nil:
		return out, fmt.Errorf("failed to read the kubernetes Service: %w", err)
	}
	for _, ip := range svc.Spec.ClusterIPs {
		out.CIDRs = appendHost(out.CIDRs, ip)
	}
	for _, p := range svc.Spec.Ports {
		out.Ports = append(out.Ports, p.Port)
	}
	var eps discoveryv1.EndpointSliceList
	err = r.List(ctx, &eps, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"})
	switch {
	case apierrors.IsForbidden(err):
	case err != nil:
		return out, fmt.Errorf("failed to list the kubernetes Service's EndpointSlices: %w", err)
	}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				out.CIDRs = appendHost(out.CIDRs, a)
			}
		}
		for _, p := range s.Ports {
			if p.Port != nil {
				out.Ports = append(out.Ports, *p.Port)
			}
		}
	}
	out.Normalize()
	return out, nil
}

// apiServerAddrs is the last reading of the API server's addresses, shared
// by the operator's reconcilers: the watcher (watchAPIServer) keeps it
// current, so a namespace's reconcile reads nothing from the API server
// for it.
type apiServerAddrs struct {
	mu    sync.Mutex
	known bool
	last  podspec.APIServer
}

// get returns the last reading, reading once when there is none yet.
func (a *apiServerAddrs) get(ctx context.Context, r client.Reader) (podspec.APIServer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known {
		return a.last, nil
	}
	now, err := apiServerEgress(ctx, r)
	if err != nil {
		return podspec.APIServer{}, err
	}
	a.known, a.last = true, now
	return now, nil
}

// set records a new reading.
func (a *apiServerAddrs) set(now podspec.APIServer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known, a.last = true, now
}

// appendHost appends ip as a one-address CIDR; what does not parse is left out.
func appendHost(cidrs []string, ip string) []string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return cidrs
	}
	return append(cidrs, netip.PrefixFrom(a, a.BitLen()).String())
}

// watchAPIServer calls changed whenever the API server's addresses differ
// from the last reading, checking every apiServerCheck until ctx ends.
func watchAPIServer(ctx context.Context, r client.Reader, last podspec.APIServer, changed func(podspec.APIServer)) {
	t := time.NewTicker(apiServerCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := apiServerEgress(ctx, r)
		if err != nil {
			log.FromContext(ctx).Error(err, "Failed to read the API server's addresses; the session pods' NetworkPolicy keeps the last ones")
			continue
		}
		if !slices.Equal(now.CIDRs, last.CIDRs) || !slices.Equal(now.Ports, last.Ports) {
			last = now
			changed(now)
		}
	}
}
