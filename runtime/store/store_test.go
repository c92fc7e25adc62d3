package store_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

func TestTenantFrom(t *testing.T) {
	tests := []struct {
		name    string
		ctx     context.Context
		want    string
		wantErr error
	}{
		{name: "set", ctx: store.WithTenant(context.Background(), "team-a"), want: "team-a"},
		{name: "missing", ctx: context.Background(), wantErr: store.ErrNoTenant},
		{name: "empty", ctx: store.WithTenant(context.Background(), ""), wantErr: store.ErrNoTenant},
		{name: "innermost wins", ctx: store.WithTenant(store.WithTenant(context.Background(), "a"), "b"), want: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := store.TenantFrom(tt.ctx)
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestParseSessionID(t *testing.T) {
	tests := []struct {
		id                    string
		channel, chat, dialog string
		wantErr               bool
	}{
		{id: "cli_chat:sid_abc123:default", channel: "cli_chat", chat: "sid_abc123", dialog: "default"},
		{id: "webhook:urn:x:1:d_x", channel: "webhook", chat: "urn:x:1", dialog: "d_x"},
		{id: "feishu:oc_1", wantErr: true},
		{id: ":chat:d", wantErr: true},
		{id: "web::d", wantErr: true},
		{id: "web:chat:", wantErr: true},
		{id: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			g := NewWithT(t)
			channel, chat, dialog, err := store.ParseSessionID(tt.id)
			if tt.wantErr {
				g.Expect(err).To(MatchError(store.ErrInvalid))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect([]string{channel, chat, dialog}).To(Equal([]string{tt.channel, tt.chat, tt.dialog}))
			g.Expect(store.SessionID(channel, chat, dialog)).To(Equal(tt.id))
		})
	}
}

func TestNewID(t *testing.T) {
	g := NewWithT(t)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := store.NewID()
		g.Expect(id).To(MatchRegexp(uuid.String()))
		g.Expect(seen[id]).To(BeFalse())
		seen[id] = true
	}
}

func TestMessageLLMRoundTrip(t *testing.T) {
	lm := llm.Message{Role: llm.RoleTool, Content: "out", ToolCalls: []llm.ToolCall{{ID: "1", Name: "n", Arguments: "{"}},
		ToolCallID: "call_1", Name: "bash", IsError: true, Images: []llm.Image{{MediaType: "image/png", Data: []byte{1, 2}}}}
	NewWithT(t).Expect(store.FromLLM(lm).ToLLM()).To(Equal(lm))
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		check func() error
		valid bool
	}{
		{"session from parts", store.Session{Channel: "web", ChatID: "c", DialogID: "d"}.Validate, true},
		{"session with matching id", store.Session{ID: "web:c:d", Channel: "web", ChatID: "c", DialogID: "d"}.Validate, true},
		{"session id mismatch", store.Session{ID: "web:c:x", Channel: "web", ChatID: "c", DialogID: "d"}.Validate, false},
		{"session without chat", store.Session{Channel: "web", DialogID: "d"}.Validate, false},
		{"session colon in channel", store.Session{Channel: "a:b", ChatID: "c", DialogID: "d"}.Validate, false},
		{"message", store.Message{ID: "m", Role: llm.RoleAssistant}.Validate, true},
		{"message without id", store.Message{Role: llm.RoleUser}.Validate, false},
		{"message bad role", store.Message{ID: "m", Role: "narrator"}.Validate, false},
		{"message NUL in tool arguments", store.Message{ID: "m", Role: llm.RoleAssistant,
			ToolCalls: []llm.ToolCall{{ID: "1", Name: "n", Arguments: "\x00"}}}.Validate, false},
		{"memory", store.Memory{Agent: "a", Key: "k", Category: store.MemoryTimeline, Importance: 0.3}.Validate, true},
		{"memory bad source", store.Memory{Agent: "a", Key: "k", Category: store.MemoryKnowledge, Source: "web"}.Validate, false},
		{"memory negative importance", store.Memory{Agent: "a", Key: "k", Category: store.MemoryKnowledge, Importance: -0.1}.Validate, false},
		{"cron run", store.CronRun{Job: "ns/j", RunID: "r", ScheduledTime: time.Unix(1, 0)}.Validate, true},
		{"cron run bad outcome", store.CronRun{Job: "ns/j", RunID: "r", ScheduledTime: time.Unix(1, 0), Outcome: "meh"}.Validate, false},
		{"agent run default status", store.AgentRun{ID: "r", Agent: "a"}.Validate, true},
		{"agent run bad status", store.AgentRun{ID: "r", Agent: "a", Status: "paused"}.Validate, false},
		{"delivery", store.Delivery{ID: "d", Channel: "web", ChatID: "c"}.Validate, true},
		{"delivery negative attempts", store.Delivery{ID: "d", Channel: "web", ChatID: "c", Attempts: -1}.Validate, false},
		{"artifact", store.Artifact{ID: "a", Name: "n", BlobKey: "k"}.Validate, true},
		{"artifact negative size", store.Artifact{ID: "a", Name: "n", BlobKey: "k", Size: -1}.Validate, false},
		{"lease", func() error { return store.ValidateLease("s", "h", time.Second) }, true},
		{"lease sub-millisecond", func() error { return store.ValidateLease("s", "h", time.Microsecond) }, false},
		{"lease without holder", func() error { return store.ValidateLease("s", "", time.Second) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			if tt.valid {
				g.Expect(tt.check()).To(Succeed())
			} else {
				g.Expect(tt.check()).To(MatchError(store.ErrInvalid))
			}
		})
	}
}
