package storetest

import (
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

func testSessions(t *testing.T, newStore NewStore) {
	t.Run("CreateAndGet", func(t *testing.T) {
		g := gomega.NewWithT(t)
		st := newStore(t)
		ctx := ctxFor(t, tenantA)

		created := mustCreateSession(ctx, t, st, newSession("web", "chat:1", "default"))
		g.Expect(created.ID).To(gomega.Equal("web:chat:1:default"), "id is built from the parts")
		g.Expect(created.Tenant).To(gomega.Equal(tenantA))
		g.Expect(created.Agent).To(gomega.Equal("helper"))
		g.Expect(created.Title).To(gomega.Equal("New chat"))
		g.Expect(created.TitleIsDefault).To(gomega.BeTrue())
		g.Expect(created.CreatedAt).NotTo(gomega.BeZero())
		g.Expect(created.UpdatedAt).To(gomega.Equal(created.CreatedAt))
		g.Expect(created.LastMessageAt).To(gomega.Equal(created.CreatedAt))
		g.Expect(created.ArchivedAt).To(gomega.BeNil())
		g.Expect(created.DeletedAt).To(gomega.BeNil())
		g.Expect(created.LastCompressedAt).To(gomega.BeNil())

		got, err := st.GetSession(ctx, created.ID)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(created))

		withTime := newSession("web", "chat:1", "d2")
		withTime.ID = "web:chat:1:d2"
		withTime.CreatedAt = t0
		got = mustCreateSession(ctx, t, st, withTime)
		g.Expect(got.CreatedAt).To(gomega.Equal(t0))
		g.Expect(got.LastMessageAt).To(gomega.Equal(t0))
	})

	t.Run("CreateRejects", func(t *testing.T) {
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		mustCreateSession(ctx, t, st, newSession("web", "c1", "d1"))
		tests := []struct {
			name    string
			session store.Session
			want    error
		}{
			{name: "duplicate", session: newSession("web", "c1", "d1"), want: store.ErrExists},
			{name: "id disagrees with parts", session: store.Session{ID: "web:c1:other", Channel: "web", ChatID: "c1", DialogID: "d9"}, want: store.ErrInvalid},
			{name: "missing dialog", session: store.Session{Channel: "web", ChatID: "c1"}, want: store.ErrInvalid},
			{name: "colon in dialog", session: newSession("web", "c1", "a:b"), want: store.ErrInvalid},
			{name: "NUL in title", session: store.Session{Channel: "web", ChatID: "c1", DialogID: "d3", Title: "a\x00b"}, want: store.ErrInvalid},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := st.CreateSession(ctx, tt.session)
				gomega.NewWithT(t).Expect(err).To(gomega.MatchError(tt.want))
			})
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		st := newStore(t)
		_, err := st.GetSession(ctxFor(t, tenantA), "web:none:d")
		gomega.NewWithT(t).Expect(err).To(gomega.MatchError(store.ErrNotFound))
	})

	t.Run("Update", testUpdateSession(newStore))
	t.Run("List", testListSessions(newStore))
}

func testUpdateSession(newStore NewStore) func(t *testing.T) {
	return func(t *testing.T) {
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		tests := []struct {
			name   string
			update store.SessionUpdate
			check  func(g gomega.Gomega, before, after store.Session)
		}{
			{
				name:   "nothing set changes nothing but UpdatedAt",
				update: store.SessionUpdate{},
				check: func(g gomega.Gomega, before, after store.Session) {
					after.UpdatedAt = before.UpdatedAt
					g.Expect(after).To(gomega.Equal(before))
				},
			},
			{
				name:   "title",
				update: store.SessionUpdate{Title: ptr("Trip to Kyoto"), TitleIsDefault: ptr(false)},
				check: func(g gomega.Gomega, before, after store.Session) {
					g.Expect(after.Title).To(gomega.Equal("Trip to Kyoto"))
					g.Expect(after.TitleIsDefault).To(gomega.BeFalse())
				},
			},
			{
				name:   "archive",
				update: store.SessionUpdate{Archived: ptr(true)},
				check: func(g gomega.Gomega, before, after store.Session) {
					g.Expect(after.ArchivedAt).NotTo(gomega.BeNil())
					g.Expect(after.DeletedAt).To(gomega.BeNil())
				},
			},
			{
				name:   "soft delete",
				update: store.SessionUpdate{Deleted: ptr(true)},
				check: func(g gomega.Gomega, before, after store.Session) {
					g.Expect(after.DeletedAt).NotTo(gomega.BeNil())
					g.Expect(after.ArchivedAt).To(gomega.BeNil())
				},
			},
			{
				name:   "compression mark",
				update: store.SessionUpdate{LastCompressedAt: ptr(t0.Add(time.Hour))},
				check: func(g gomega.Gomega, before, after store.Session) {
					g.Expect(after.LastCompressedAt).To(gomega.Equal(ptr(t0.Add(time.Hour))))
				},
			},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := gomega.NewWithT(t)
				before := mustCreateSession(ctx, t, st, newSession("web", "c1", "d"+string(rune('a'+i))))
				after, err := st.UpdateSession(ctx, before.ID, tt.update)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(after.UpdatedAt).To(gomega.BeTemporally(">=", before.UpdatedAt))
				tt.check(g, before, after)
				got, err := st.GetSession(ctx, before.ID)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(got).To(gomega.Equal(after), "what Update returns is what is stored")
			})
		}

		t.Run("archive and delete are reversible and keep their first time", func(t *testing.T) {
			g := gomega.NewWithT(t)
			s := mustCreateSession(ctx, t, st, newSession("web", "c2", "d1"))
			first, err := st.UpdateSession(ctx, s.ID, store.SessionUpdate{Archived: ptr(true), Deleted: ptr(true)})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			again, err := st.UpdateSession(ctx, s.ID, store.SessionUpdate{Archived: ptr(true), Deleted: ptr(true)})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(again.ArchivedAt).To(gomega.Equal(first.ArchivedAt))
			g.Expect(again.DeletedAt).To(gomega.Equal(first.DeletedAt))
			restored, err := st.UpdateSession(ctx, s.ID, store.SessionUpdate{Archived: ptr(false), Deleted: ptr(false)})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(restored.ArchivedAt).To(gomega.BeNil())
			g.Expect(restored.DeletedAt).To(gomega.BeNil())
		})

		t.Run("missing", func(t *testing.T) {
			_, err := st.UpdateSession(ctx, "web:none:d", store.SessionUpdate{Title: ptr("x")})
			gomega.NewWithT(t).Expect(err).To(gomega.MatchError(store.ErrNotFound))
		})
	}
}

func testListSessions(newStore NewStore) func(t *testing.T) {
	return func(t *testing.T) {
		st := newStore(t)
		ctx := ctxFor(t, tenantA)
		mk := func(channel, chat, dialog string, at time.Duration) store.Session {
			s := newSession(channel, chat, dialog)
			s.CreatedAt = t0.Add(at)
			return mustCreateSession(ctx, t, st, s)
		}
		oldest := mk("web", "c1", "d1", 1*time.Second)
		middle := mk("web", "c1", "d2", 2*time.Second)
		newest := mk("web", "c2", "d1", 3*time.Second)
		other := func() store.Session {
			s := newSession("feishu", "c1", "d1")
			s.CreatedAt, s.Agent = t0.Add(4*time.Second), "assistant"
			return mustCreateSession(ctx, t, st, s)
		}()
		archived := mk("web", "c1", "d3", 5*time.Second)
		deleted := mk("web", "c1", "d4", 6*time.Second)
		g := gomega.NewWithT(t)
		_, err := st.UpdateSession(ctx, archived.ID, store.SessionUpdate{Archived: ptr(true)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = st.UpdateSession(ctx, deleted.ID, store.SessionUpdate{Deleted: ptr(true)})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		// A message moves the oldest session to the front.
		m := userMsg("m1", "hello")
		m.CreatedAt = t0.Add(time.Minute)
		mustAppend(ctx, t, st, oldest.ID, m)

		tests := []struct {
			name   string
			filter store.SessionFilter
			want   []string
		}{
			{name: "all live, newest message first", filter: store.SessionFilter{},
				want: []string{oldest.ID, other.ID, newest.ID, middle.ID}},
			{name: "by channel", filter: store.SessionFilter{Channel: "web"},
				want: []string{oldest.ID, newest.ID, middle.ID}},
			{name: "by chat", filter: store.SessionFilter{Channel: "web", ChatID: "c1"},
				want: []string{oldest.ID, middle.ID}},
			{name: "with archived", filter: store.SessionFilter{Channel: "web", ChatID: "c1", IncludeArchived: true},
				want: []string{oldest.ID, archived.ID, middle.ID}},
			{name: "with deleted", filter: store.SessionFilter{Channel: "web", ChatID: "c1", IncludeDeleted: true},
				want: []string{oldest.ID, deleted.ID, middle.ID}},
			{name: "with both", filter: store.SessionFilter{Channel: "web", ChatID: "c1", IncludeArchived: true, IncludeDeleted: true},
				want: []string{oldest.ID, deleted.ID, archived.ID, middle.ID}},
			{name: "limit", filter: store.SessionFilter{Limit: 2},
				want: []string{oldest.ID, other.ID}},
			{name: "no match", filter: store.SessionFilter{Channel: "slack"}, want: []string{}},
			{name: "by agent", filter: store.SessionFilter{Agent: "assistant"}, want: []string{other.ID}},
			{name: "by agent and channel", filter: store.SessionFilter{Agent: "helper", Channel: "web"},
				want: []string{oldest.ID, newest.ID, middle.ID}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := gomega.NewWithT(t)
				got, err := st.ListSessions(ctx, tt.filter)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				gotIDs := []string{}
				for _, s := range got {
					gotIDs = append(gotIDs, s.ID)
				}
				g.Expect(gotIDs).To(gomega.Equal(tt.want))
			})
		}
	}
}

func testCurrentDialog(t *testing.T, newStore NewStore) {
	st := newStore(t)
	ctx := ctxFor(t, tenantA)
	g := gomega.NewWithT(t)

	_, err := st.CurrentDialog(ctx, "web", "c1")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	for _, s := range [][3]string{{"web", "c1", "d1"}, {"web", "c1", "d2"}, {"web", "c2", "d7"}, {"feishu", "c1", "d9"}} {
		mustCreateSession(ctx, t, st, newSession(s[0], s[1], s[2]))
	}

	g.Expect(st.SetCurrentDialog(ctx, "web", "c1", "d1")).To(gomega.Succeed())
	g.Expect(st.SetCurrentDialog(ctx, "web", "c2", "d7")).To(gomega.Succeed())
	g.Expect(st.SetCurrentDialog(ctx, "feishu", "c1", "d9")).To(gomega.Succeed())
	g.Expect(st.SetCurrentDialog(ctx, "web", "c1", "d2")).To(gomega.Succeed(), "switching overwrites")

	tests := []struct{ channel, chat, want string }{
		{"web", "c1", "d2"},
		{"web", "c2", "d7"},
		{"feishu", "c1", "d9"},
	}
	for _, tt := range tests {
		got, err := st.CurrentDialog(ctx, tt.channel, tt.chat)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(tt.want), "%s:%s", tt.channel, tt.chat)
	}
	g.Expect(st.SetCurrentDialog(ctx, "web", "c1", "")).To(gomega.MatchError(store.ErrInvalid))

	// A current dialog whose session is deleted, or was never created, is
	// no current dialog.
	_, err = st.UpdateSession(ctx, "web:c2:d7", store.SessionUpdate{Deleted: ptr(true)})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = st.CurrentDialog(ctx, "web", "c2")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	g.Expect(st.SetCurrentDialog(ctx, "web", "c3", "d-none")).To(gomega.Succeed())
	_, err = st.CurrentDialog(ctx, "web", "c3")
	g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
}
