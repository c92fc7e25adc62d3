package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

func testMessages(t *testing.T, newStore NewStore) {
	t.Run("RoundTrip", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		s := mustCreateSession(ctx, t, st, newSession("web", "c1", "d1"))

		in := []store.Message{
			{ID: "in-1", Role: llm.RoleUser, Content: "What's in this picture? 这是什么？",
				Images: []llm.Image{{MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0, 1, 2}}},
				Meta:   map[string]string{"channel_message_id": "tg-42"}, CreatedAt: t0},
			{ID: "out-1", Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "web_fetch", Arguments: `{"url":"https://example.com"}`},
				{ID: "call_2", Name: "bash", Arguments: `{"cmd":`}, // malformed arguments are kept verbatim
			}, CreatedAt: t0.Add(time.Second)},
			{ID: "tool-1", Role: llm.RoleTool, ToolCallID: "call_1", Name: "web_fetch", Content: "404", IsError: true,
				CreatedAt: t0.Add(2 * time.Second)},
			{ID: "out-2", Role: llm.RoleAssistant, Content: "It is a logo."},
		}
		out := mustAppend(ctx, t, st, s.ID, in...)
		g.Expect(seqs(out)).To(gomega.Equal([]int64{1, 2, 3, 4}))
		g.Expect(out[3].CreatedAt).NotTo(gomega.BeZero(), "a zero CreatedAt is set by the store")
		for i := range in {
			want := in[i]
			want.Tenant, want.SessionID, want.Seq = tenantA, s.ID, int64(i+1)
			if want.CreatedAt.IsZero() {
				want.CreatedAt = out[i].CreatedAt
			}
			g.Expect(out[i]).To(gomega.Equal(want))
		}

		loaded, err := st.LoadMessages(ctx, s.ID, store.LoadOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(loaded).To(gomega.Equal(out), "loading returns what appending returned")

		after, err := st.GetSession(ctx, s.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(after.LastMessageAt).To(gomega.Equal(latest(out)))
		g.Expect(after.UpdatedAt).To(gomega.BeTemporally(">=", s.UpdatedAt))
	})

	t.Run("IdempotentOnID", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		s := mustCreateSession(ctx, t, st, newSession("web", "c1", "d1"))

		first := mustAppend(ctx, t, st, s.ID, userMsg("m1", "hello"))
		g.Expect(first[0].Duplicate).To(gomega.BeFalse())

		// The same message again (a redelivered inbound message) is not stored
		// twice; the stored copy comes back, even if the retry's body differs.
		again := mustAppend(ctx, t, st, s.ID, userMsg("m1", "hello (retry)"))
		g.Expect(again[0].Duplicate).To(gomega.BeTrue())
		g.Expect(again[0].Seq).To(gomega.Equal(int64(1)))
		g.Expect(again[0].Content).To(gomega.Equal("hello"))

		// A retried batch of which only the first message had landed stores
		// only the rest.
		batch := mustAppend(ctx, t, st, s.ID, userMsg("m1", "hello"), userMsg("m2", "two"), userMsg("m3", "three"))
		g.Expect(seqs(batch)).To(gomega.Equal([]int64{1, 2, 3}))
		g.Expect([]bool{batch[0].Duplicate, batch[1].Duplicate, batch[2].Duplicate}).To(gomega.Equal([]bool{true, false, false}))

		// The same ID twice in one batch is stored once.
		inBatch := mustAppend(ctx, t, st, s.ID, userMsg("m4", "four"), userMsg("m4", "four"))
		g.Expect(seqs(inBatch)).To(gomega.Equal([]int64{4, 4}))
		g.Expect(inBatch[1].Duplicate).To(gomega.BeTrue())

		// An all-duplicate batch changes nothing.
		before, err := st.GetSession(ctx, s.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		mustAppend(ctx, t, st, s.ID, userMsg("m2", "two"), userMsg("m3", "three"))
		after, err := st.GetSession(ctx, s.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(after.LastMessageAt).To(gomega.Equal(before.LastMessageAt))

		n, err := st.CountMessages(ctx, s.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.Equal(int64(4)))
		loaded, err := st.LoadMessages(ctx, s.ID, store.LoadOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ids(loaded)).To(gomega.Equal([]string{"m1", "m2", "m3", "m4"}))

		// IDs are per session: the same ID in another session is a new message.
		other := mustCreateSession(ctx, t, st, newSession("web", "c1", "d2"))
		g.Expect(mustAppend(ctx, t, st, other.ID, userMsg("m1", "hello"))[0].Duplicate).To(gomega.BeFalse())
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		tests := []struct {
			name string
			bad  store.Message
		}{
			{name: "empty id", bad: store.Message{Role: llm.RoleUser, Content: "x"}},
			{name: "unknown role", bad: store.Message{ID: "bad", Role: "robot", Content: "x"}},
			{name: "NUL in content", bad: store.Message{ID: "bad", Role: llm.RoleTool, Content: "bin\x00ary"}},
			{name: "NUL in meta", bad: store.Message{ID: "bad", Role: llm.RoleUser, Meta: map[string]string{"k": "\x00"}}},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := gomega.NewWithT(t)
				s := mustCreateSession(ctx, t, st, newSession("web", "c1", fmt.Sprintf("d%d", i)))
				_, err := st.AppendMessages(ctx, s.ID, userMsg("ok-1", "a"), tt.bad, userMsg("ok-2", "b"))
				g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
				n, err := st.CountMessages(ctx, s.ID)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(n).To(gomega.BeZero(), "a failed batch stores nothing")
				after, err := st.GetSession(ctx, s.ID)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(after).To(gomega.Equal(s), "a failed batch leaves the session as it was")
				// The retry without the bad message starts at Seq 1: the failed
				// batch consumed no numbers.
				out := mustAppend(ctx, t, st, s.ID, userMsg("ok-1", "a"), userMsg("ok-2", "b"))
				g.Expect(seqs(out)).To(gomega.Equal([]int64{1, 2}))
				g.Expect(out[0].Duplicate).To(gomega.BeFalse())
			})
		}
	})

	t.Run("MissingSession", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		_, err := st.AppendMessages(ctx, "web:c1:none", userMsg("m1", "x"))
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		_, err = st.LoadMessages(ctx, "web:c1:none", store.LoadOptions{})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		_, err = st.CountMessages(ctx, "web:c1:none")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	})

	t.Run("ConcurrentAppendersGetIncreasingSeq", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		s := mustCreateSession(ctx, t, st, newSession("web", "c1", "d1"))
		const writers, perWriter = 8, 25
		results := make([][]store.Message, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					msgs := []store.Message{userMsg(fmt.Sprintf("w%d-%d", w, i), "x")}
					if i%5 == 0 { // some batches of two
						msgs = append(msgs, userMsg(fmt.Sprintf("w%d-%d-b", w, i), "y"))
					}
					out, err := st.AppendMessages(ctx, s.ID, msgs...)
					if err != nil {
						errs[w] = err
						return
					}
					results[w] = append(results[w], out...)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			g.Expect(err).NotTo(gomega.HaveOccurred())
		}
		total := 0
		for w, msgs := range results {
			total += len(msgs)
			for i := 1; i < len(msgs); i++ {
				g.Expect(msgs[i].Seq).To(gomega.BeNumerically(">", msgs[i-1].Seq), "writer %d's own messages in order", w)
			}
		}
		loaded, err := st.LoadMessages(ctx, s.ID, store.LoadOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(loaded).To(gomega.HaveLen(total))
		for i, m := range loaded {
			g.Expect(m.Seq).To(gomega.Equal(int64(i+1)), "Seq is gap-free and unique")
		}
	})

	t.Run("Load", testLoadMessages(newStore))
}

func testLoadMessages(newStore NewStore) func(t *testing.T) {
	return func(t *testing.T) {
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		s := mustCreateSession(ctx, t, st, newSession("web", "c1", "d1"))
		empty := mustCreateSession(ctx, t, st, newSession("web", "c1", "empty"))
		var msgs []store.Message
		for i := range 10 {
			m := userMsg(fmt.Sprintf("m%d", i+1), fmt.Sprint(i+1))
			m.CreatedAt = t0.Add(time.Duration(i) * time.Second)
			msgs = append(msgs, m)
		}
		mustAppend(ctx, t, st, s.ID, msgs...)

		tests := []struct {
			name    string
			session string
			opts    store.LoadOptions
			want    []int64
		}{
			{name: "all", opts: store.LoadOptions{}, want: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
			{name: "last 3", opts: store.LoadOptions{Last: 3}, want: []int64{8, 9, 10}},
			{name: "last more than there are", opts: store.LoadOptions{Last: 50}, want: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
			{name: "after seq", opts: store.LoadOptions{AfterSeq: 7}, want: []int64{8, 9, 10}},
			{name: "after the last seq", opts: store.LoadOptions{AfterSeq: 10}, want: []int64{}},
			{name: "since is inclusive", opts: store.LoadOptions{Since: t0.Add(5 * time.Second)}, want: []int64{6, 7, 8, 9, 10}},
			{name: "after seq and last", opts: store.LoadOptions{AfterSeq: 2, Last: 3}, want: []int64{8, 9, 10}},
			{name: "since and after seq", opts: store.LoadOptions{Since: t0.Add(2 * time.Second), AfterSeq: 5}, want: []int64{6, 7, 8, 9, 10}},
			{name: "since and last", opts: store.LoadOptions{Since: t0.Add(7 * time.Second), Last: 5}, want: []int64{8, 9, 10}},
			{name: "empty session", session: empty.ID, want: []int64{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := gomega.NewWithT(t)
				id := s.ID
				if tt.session != "" {
					id = tt.session
				}
				got, err := st.LoadMessages(ctx, id, tt.opts)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(seqs(got)).To(gomega.Equal(tt.want))
			})
		}

		g := gomega.NewWithT(t)
		n, err := st.CountMessages(ctx, s.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.Equal(int64(10)))
		n, err = st.CountMessages(ctx, empty.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.BeZero())
	}
}

func latest(msgs []store.Message) time.Time {
	var t time.Time
	for _, m := range msgs {
		if m.CreatedAt.After(t) {
			t = m.CreatedAt
		}
	}
	return t
}
