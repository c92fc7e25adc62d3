package cluster

import (
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// TenantSet is the set of tenants (namespaces) that have Agents, kept from
// the gateway's Agent informer: the outbound relay reads the outbound
// streams of these tenants. A tenant enters with its first Agent and leaves
// with its last.
type TenantSet struct {
	mu      sync.Mutex
	agents  map[string]map[string]struct{} // tenant -> agent names
	changed chan struct{}
}

// NewTenantSet returns an empty set.
func NewTenantSet() *TenantSet {
	return &TenantSet{agents: map[string]map[string]struct{}{}, changed: make(chan struct{})}
}

// Add records an agent of tenant.
func (s *TenantSet) Add(tenant, agent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names, ok := s.agents[tenant]
	if !ok {
		names = map[string]struct{}{}
		s.agents[tenant] = names
		s.notify()
	}
	names[agent] = struct{}{}
}

// Remove forgets an agent of tenant.
func (s *TenantSet) Remove(tenant, agent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names, ok := s.agents[tenant]
	if !ok {
		return
	}
	delete(names, agent)
	if len(names) == 0 {
		delete(s.agents, tenant)
		s.notify()
	}
}

// notify wakes whoever waits for a change of tenants; s.mu is held.
func (s *TenantSet) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Snapshot returns the tenants, sorted, and a channel closed when they
// change next.
func (s *TenantSet) Snapshot() ([]string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.agents))
	for t := range s.agents {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, s.changed
}

// Handler keeps the set from an Agent informer's events.
func (s *TenantSet) Handler() toolscache.ResourceEventHandler {
	add := func(obj any) {
		if a, ok := obj.(*picobotv1alpha1.Agent); ok {
			s.Add(a.Namespace, a.Name)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, n any) { add(n) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if a, ok := obj.(*picobotv1alpha1.Agent); ok {
				s.Remove(a.Namespace, a.Name)
			}
		},
	}
}
