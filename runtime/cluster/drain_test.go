package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestATerminatedPodGivesItsTurnTheGraceAndExitsCleanly(t *testing.T) {
	g := NewWithT(t)
	ctx, terminate := context.WithCancel(context.Background())
	runningAtTerm := make(chan bool, 1)
	err := runDraining(ctx, 100*time.Millisecond, func(hard context.Context) error {
		terminate() // SIGTERM while a turn runs
		<-ctx.Done()
		runningAtTerm <- hard.Err() == nil
		<-hard.Done() // the turn outlives the grace: cut short
		return hard.Err()
	})
	g.Expect(<-runningAtTerm).To(BeTrue(), "the turn goes on after SIGTERM")
	g.Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "a terminated pod ends cleanly (session exits 0 on Canceled)")

	// A loop that ends within the grace is not cut, and its own error stays.
	ctx, terminate = context.WithCancel(context.Background())
	boom := errors.New("boom")
	err = runDraining(ctx, time.Hour, func(hard context.Context) error {
		terminate()
		g.Expect(hard.Err()).NotTo(HaveOccurred())
		return boom
	})
	g.Expect(err).To(MatchError(boom))
}
