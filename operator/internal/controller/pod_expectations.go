package controller

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// expectTimeout is how long a pod the operator created counts toward its
// Agent's pool while the informer cache has not listed it: far longer than
// the cache lags, short enough that a pod deleted before the cache saw it
// is not counted for long.
const expectTimeout = 30 * time.Second

// podExpectations are the session pods the operator created and its cache
// has not listed yet, per Agent (as a ReplicaSet's expectations). The pool
// is planned from the cache, and a reconcile right after a creation (the
// wake notices and pod events enqueue the Agent at once) would otherwise
// see the pool short by the new pod and create it again. The zero value is
// ready to use.
type podExpectations struct {
	mu sync.Mutex
	// now is the clock (nil: time.Now).
	now  func() time.Time
	pods map[types.NamespacedName]map[string]time.Time
}

func (e *podExpectations) clock() time.Time {
	if e.now != nil {
		return e.now()
	}
	return time.Now()
}

// created records a pod created for agent.
func (e *podExpectations) created(agent types.NamespacedName, pod string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pods == nil {
		e.pods = map[types.NamespacedName]map[string]time.Time{}
	}
	if e.pods[agent] == nil {
		e.pods[agent] = map[string]time.Time{}
	}
	e.pods[agent][pod] = e.clock()
}

// unseen lists, sorted, the pods created for agent that listed lacks and
// that were created less than expectTimeout ago; the others are forgotten
// (listed once, the cache has them).
func (e *podExpectations) unseen(agent types.NamespacedName, listed map[string]*corev1.Pod) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock()
	var out []string
	for name, at := range e.pods[agent] {
		if _, ok := listed[name]; ok || now.Sub(at) >= expectTimeout {
			delete(e.pods[agent], name)
			continue
		}
		out = append(out, name)
	}
	if len(e.pods[agent]) == 0 {
		delete(e.pods, agent)
	}
	sort.Strings(out)
	return out
}
