package storetest

import (
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// taskStore returns the store's TaskStore side; every implementation has one.
func taskStore(t *testing.T, st store.Store) store.TaskStore {
	t.Helper()
	ts, ok := st.(store.TaskStore)
	if !ok {
		t.Fatalf("%T does not implement store.TaskStore", st)
	}
	return ts
}

func testTasks(t *testing.T, newStore NewStore) {
	t.Run("CreateGetUpdateList", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ts := taskStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		due := t0.Add(time.Hour)
		created, err := ts.CreateTask(ctx, store.Task{ID: "t1", Agent: "helper", Title: "Weekly audit", Note: "check logs",
			DueAt: &due, Repeat: "week mon 09:00", TZ: "Asia/Shanghai", CreatedAt: t0})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(created.Tenant).To(gomega.Equal(tenantA))
		g.Expect(created.Priority).To(gomega.Equal(store.DefaultTaskPriority))
		g.Expect(created.Continuity).To(gomega.Equal(store.ContinuityContinue))
		g.Expect(created.State).To(gomega.Equal(store.TaskQueued))
		g.Expect(created.Version).To(gomega.BeEquivalentTo(1))
		g.Expect(created.CreatedAt).To(gomega.BeTemporally("==", t0))
		g.Expect(*created.DueAt).To(gomega.BeTemporally("==", due))

		got, err := ts.GetTask(ctx, "t1")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(created))

		_, err = ts.CreateTask(ctx, store.Task{ID: "t1", Title: "again"})
		g.Expect(err).To(gomega.MatchError(store.ErrExists))

		awaiting := store.TaskAwaiting
		up, err := ts.UpdateTask(ctx, "t1", store.TaskUpdate{Priority: ptr(1), State: &awaiting,
			Awaiting: ptr("which server to audit"), ClearDueAt: true, Job: ptr("task-t1"), IfVersion: 1})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(up.Priority).To(gomega.Equal(1))
		g.Expect(up.State).To(gomega.Equal(store.TaskAwaiting))
		g.Expect(up.Awaiting).To(gomega.Equal("which server to audit"))
		g.Expect(up.DueAt).To(gomega.BeNil())
		g.Expect(up.Job).To(gomega.Equal("task-t1"))
		g.Expect(up.Title).To(gomega.Equal("Weekly audit"), "fields not set stay")
		g.Expect(up.Version).To(gomega.BeEquivalentTo(2))

		_, err = ts.UpdateTask(ctx, "t1", store.TaskUpdate{Note: ptr("stale"), IfVersion: 1})
		g.Expect(err).To(gomega.MatchError(store.ErrVersionConflict))
		_, err = ts.UpdateTask(ctx, "nope", store.TaskUpdate{Note: ptr("x")})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

		_, err = ts.CreateTask(ctx, store.Task{ID: "t2", Agent: "helper", Title: "Digest", Priority: 2, CreatedAt: t0})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = ts.CreateTask(ctx, store.Task{ID: "t3", Agent: "other", Title: "Other's", CreatedAt: t0})
		g.Expect(err).NotTo(gomega.HaveOccurred())

		list, err := ts.ListTasks(ctx, store.TaskFilter{Agent: "helper"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(taskIDs(list)).To(gomega.Equal([]string{"t1", "t2"}), "most urgent first")
		list, err = ts.ListTasks(ctx, store.TaskFilter{States: []store.TaskState{store.TaskQueued}})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(taskIDs(list)).To(gomega.Equal([]string{"t2", "t3"}))
		list, err = ts.ListTasks(ctx, store.TaskFilter{Limit: 1})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(list).To(gomega.HaveLen(1))

		other, err := ts.ListTasks(ctxFor(t, tenantB), store.TaskFilter{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(other).To(gomega.BeEmpty(), "tenant B sees none of tenant A's tasks")
		_, err = ts.GetTask(ctxFor(t, tenantB), "t1")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		_, err = ts.UpdateTask(ctxFor(t, tenantB), "t1", store.TaskUpdate{Note: ptr("x")})
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	})

	t.Run("InvalidInput", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ts := taskStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		for _, bad := range []store.Task{
			{ID: "", Title: "x"},
			{ID: "a", Title: ""},
			{ID: "a", Title: "x", Priority: 6},
			{ID: "a", Title: "x", Continuity: "sometimes"},
			{ID: "a", Title: "x", State: "paused"},
			{ID: "a", Title: "x\x00"},
		} {
			_, err := ts.CreateTask(ctx, bad)
			g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "%+v", bad)
		}
		_, err := ts.CreateTask(ctx, store.Task{ID: "a", Title: "x"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = ts.UpdateTask(ctx, "a", store.TaskUpdate{Priority: ptr(0)})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = ts.UpdateTask(ctx, "a", store.TaskUpdate{DueAt: &t0, ClearDueAt: true})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = ts.CreateTask(t.Context(), store.Task{ID: "b", Title: "x"})
		g.Expect(err).To(gomega.MatchError(store.ErrNoTenant))
	})

	t.Run("Agenda", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ts := taskStore(t, newStore(t))
		ctx := ctxFor(t, tenantA)
		later, err := ts.CreateAgendaItem(ctx, store.AgendaItem{ID: "a2", Agent: "helper", At: t0.Add(48 * time.Hour),
			Text: "Dentist", Job: "agenda-a2", CreatedAt: t0})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(later.Tenant).To(gomega.Equal(tenantA))
		g.Expect(later.Job).To(gomega.Equal("agenda-a2"))
		day, err := ts.CreateAgendaItem(ctx, store.AgendaItem{ID: "a1", Agent: "helper", At: t0.Truncate(24 * time.Hour),
			AllDay: true, Text: "Holiday"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(day.AllDay).To(gomega.BeTrue())
		_, err = ts.CreateAgendaItem(ctx, store.AgendaItem{ID: "a1", At: t0, Text: "dup"})
		g.Expect(err).To(gomega.MatchError(store.ErrExists))
		_, err = ts.CreateAgendaItem(ctx, store.AgendaItem{ID: "a3", Text: "no time"})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))

		got, err := ts.GetAgendaItem(ctx, "a2")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(later))

		list, err := ts.ListAgendaItems(ctx, store.AgendaFilter{Agent: "helper"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(agendaIDs(list)).To(gomega.Equal([]string{"a1", "a2"}), "earliest first")

		done, err := ts.MarkAgendaItemDone(ctx, "a1", t0)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(*done.DoneAt).To(gomega.BeTemporally("==", t0))
		again, err := ts.MarkAgendaItemDone(ctx, "a1", t0.Add(time.Hour))
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(*again.DoneAt).To(gomega.BeTemporally("==", t0), "the first done time stays")
		list, err = ts.ListAgendaItems(ctx, store.AgendaFilter{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(agendaIDs(list)).To(gomega.Equal([]string{"a2"}), "done items are hidden by default")
		list, err = ts.ListAgendaItems(ctx, store.AgendaFilter{IncludeDone: true})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(agendaIDs(list)).To(gomega.Equal([]string{"a1", "a2"}))

		b := ctxFor(t, tenantB)
		_, err = ts.GetAgendaItem(b, "a2")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
		g.Expect(ts.DeleteAgendaItem(b, "a2")).To(gomega.MatchError(store.ErrNotFound))
		_, err = ts.MarkAgendaItemDone(b, "a2", t0)
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))

		g.Expect(ts.DeleteAgendaItem(ctx, "a2")).To(gomega.Succeed())
		g.Expect(ts.DeleteAgendaItem(ctx, "a2")).To(gomega.MatchError(store.ErrNotFound))
		_, err = ts.GetAgendaItem(ctx, "a2")
		g.Expect(err).To(gomega.MatchError(store.ErrNotFound))
	})
}

func taskIDs(ts []store.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func agendaIDs(as []store.AgendaItem) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	return out
}
