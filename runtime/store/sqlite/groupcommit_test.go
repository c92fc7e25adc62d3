package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// TestGroupCommit queues writes behind a write that holds the writer, so
// they commit as groups: each write gets its own outcome (a failing one
// is undone alone, a cancelled one does not run), and the others are all
// stored.
func TestGroupCommit(t *testing.T) {
	g := NewWithT(t)
	st, _ := openTemp(t)
	ctx := store.WithTenant(context.Background(), "team-a")
	const n = 40
	for i := range n {
		_, err := st.CreateSession(ctx, store.Session{ID: fmt.Sprintf("web:c%d:d", i), Channel: "web", ChatID: fmt.Sprintf("c%d", i),
			DialogID: "d", Agent: "a", Title: "t"})
		g.Expect(err).NotTo(HaveOccurred())
	}

	// A write holds the writer (the others must queue behind it, not run
	// alone before it).
	release, running := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- st.write(ctx, func(*txn, string) error { close(running); <-release; return nil })
	}()
	<-running
	cancelled, cancel := context.WithCancel(ctx)
	results := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := ctx
			sid := fmt.Sprintf("web:c%d:d", i)
			switch i % 10 {
			case 3:
				sid = "web:nobody:d" // no such session: the foreign key fails
			case 7:
				c = cancelled
			}
			_, results[i] = st.AppendMessages(c, sid, store.Message{ID: fmt.Sprintf("m%d", i), Role: llm.RoleUser, Content: "hi"})
		})
	}
	time.Sleep(100 * time.Millisecond) // let the writes queue behind the held one
	cancel()
	close(release)
	wg.Wait()
	g.Expect(<-held).To(Succeed())
	g.Expect(st.groups.Load()).To(BeNumerically(">", 0), "queued writes were committed together")
	for i, err := range results {
		sid := fmt.Sprintf("web:c%d:d", i)
		msgs, lerr := st.LoadMessages(ctx, sid, store.LoadOptions{})
		g.Expect(lerr).NotTo(HaveOccurred())
		switch i % 10 {
		case 3:
			g.Expect(err).To(HaveOccurred(), "write %d", i)
			g.Expect(msgs).To(BeEmpty())
		case 7:
			g.Expect(errors.Is(err, context.Canceled)).To(BeTrue(), "write %d: %v", i, err)
			g.Expect(msgs).To(BeEmpty())
		default:
			g.Expect(err).NotTo(HaveOccurred(), "write %d", i)
			g.Expect(msgs).To(HaveLen(1))
			g.Expect(msgs[0].Seq).To(BeEquivalentTo(1))
		}
	}
	g.Expect(st.Close()).To(Succeed())
	g.Expect(st.Close()).To(Succeed(), "a second Close")
	_, err := st.AppendMessages(ctx, "web:c0:d", store.Message{ID: "late", Role: llm.RoleUser, Content: "x"})
	g.Expect(err).To(MatchError(ContainSubstring("closed")))
}
