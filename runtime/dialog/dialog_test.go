package dialog

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

func newService(t *testing.T) (Service, context.Context) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "picobot.db"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = st.Close() })
	m := session.NewManager(session.Config{Store: st})
	s := Service{Store: st,
		Manager: func(_ context.Context, agent string) (*session.Manager, error) {
			if agent != "assistant" {
				return nil, protocol.Errorf(protocol.CodeUnknownAgent, "no agent %q", agent)
			}
			return m, nil
		},
		Tenant: func(ctx context.Context) error {
			if t, _ := store.TenantFrom(ctx); t != "team-a" {
				return protocol.Errorf(protocol.CodeForbidden, "tenant %q is not served", t)
			}
			return nil
		}}
	return s, store.WithTenant(context.Background(), "team-a")
}

func codeOf(err error) string {
	var ce *protocol.CodedError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

func TestDialogLifecycle(t *testing.T) {
	g := NewWithT(t)
	s, ctx := newService(t)
	chat := protocol.Chat{Agent: "assistant", ChatID: "u1"}

	first, err := s.CreateDialog(ctx, chat, "Trip")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Title).To(Equal("Trip"))
	second, err := s.CreateDialog(ctx, chat, "")
	g.Expect(err).NotTo(HaveOccurred())
	cur, list, err := s.Dialogs(ctx, chat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cur).To(Equal(second.DialogID))
	g.Expect(list).To(HaveLen(2))

	switched, err := s.SwitchDialog(ctx, chat, first.DialogID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(switched.ID).To(Equal(first.ID))
	renamed, err := s.RenameDialog(ctx, chat, first.DialogID, "Trip to Rome")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(renamed.Title).To(Equal("Trip to Rome"))
	archived, err := s.ArchiveDialog(ctx, chat, second.DialogID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(archived.ArchivedAt).NotTo(BeNil())

	// A deleted current dialog is no current dialog.
	g.Expect(s.DeleteDialog(ctx, chat, first.DialogID)).To(Succeed())
	cur, _, err = s.Dialogs(ctx, chat)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cur).To(BeEmpty())
	_, err = s.SwitchDialog(ctx, chat, first.DialogID)
	g.Expect(codeOf(err)).To(Equal(protocol.CodeUnknownDialog))
	g.Expect(err).To(MatchError(ContainSubstring(`no dialog "` + first.DialogID + `" in chat u1 of agent assistant`)))
}

func TestDialogErrorsCarryProtocolCodes(t *testing.T) {
	s, ctx := newService(t)
	chat := protocol.Chat{Agent: "assistant", ChatID: "u1"}
	cases := []struct {
		name string
		call func() error
		code string
	}{
		{"unknown agent", func() error {
			_, _, err := s.Dialogs(ctx, protocol.Chat{Agent: "nobody", ChatID: "u1"})
			return err
		}, protocol.CodeUnknownAgent},
		{"malformed dialog id", func() error { _, err := s.SwitchDialog(ctx, chat, "a:b"); return err }, protocol.CodeBadRequest},
		{"unknown dialog", func() error { _, err := s.ArchiveDialog(ctx, chat, "d_missing"); return err }, protocol.CodeUnknownDialog},
		{"malformed session id", func() error { _, err := s.Messages(ctx, "web:only-two", 10); return err }, protocol.CodeBadRequest},
		{"tenant not served", func() error {
			_, err := s.Messages(store.WithTenant(context.Background(), "team-b"), "web:assistant/u1:default", 10)
			return err
		}, protocol.CodeForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tc.call()
			g.Expect(err).To(HaveOccurred())
			g.Expect(codeOf(err)).To(Equal(tc.code), err.Error())
		})
	}
	g := NewWithT(t)
	_, err := s.Messages(ctx, "web:assistant/u1:d_none", 10)
	g.Expect(errors.Is(err, store.ErrNotFound)).To(BeTrue(), "the gateway maps it to unknown_session")
}
