package modelhttp

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentRequestsReuseConnections sends rounds of concurrent
// requests: after the first round, no request dials a new connection.
// http.DefaultClient (2 idle connections per host) dials 14 of every 16.
func TestConcurrentRequestsReuseConnections(t *testing.T) {
	const concurrent, rounds = 16, 5
	var dials atomic.Int64
	var mu sync.Mutex
	release := make(chan struct{})
	gate := func() chan struct{} { mu.Lock(); defer mu.Unlock(); return release }
	var arrived sync.WaitGroup
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-gate() // all requests of a round are in flight at once
		_, _ = io.WriteString(w, "ok")
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dials.Add(1)
		}
	}
	s.Start()
	defer s.Close()
	for round := range rounds {
		arrived.Add(concurrent)
		var done sync.WaitGroup
		for range concurrent {
			done.Go(func() {
				res, err := Client().Get(s.URL)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			})
		}
		arrived.Wait()
		close(gate())
		done.Wait()
		mu.Lock()
		release = make(chan struct{})
		mu.Unlock()
		if got := dials.Load(); got != concurrent {
			t.Fatalf("after round %d: %d connections dialled, want %d (one per concurrent request, then reused)", round+1, got, concurrent)
		}
	}
}
