package session

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// timelineImportance is the importance of compression summaries
// (0.3, the importance of timeline entries).
const timelineImportance = 0.3

// StoreTimeline keeps compression summaries as timeline memories in the store.
// The memory work builds search on the same records.
type StoreTimeline struct {
	Store store.Store
	Now   func() time.Time
}

// AddTimeline implements TimelineStore.
func (t StoreTimeline) AddTimeline(ctx context.Context, agent, sessionID, summary string) error {
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	_, err := t.Store.PutMemory(ctx, store.Memory{Agent: agent, Key: fmt.Sprintf("timeline/%s/%d", sessionID, now().UnixNano()),
		Content: summary, Category: store.MemoryTimeline, Kind: store.MemoryNote, Source: store.SourceAgent,
		SessionID: sessionID, Importance: timelineImportance})
	return err
}

// RecentTimeline implements TimelineStore: the latest n summaries of the
// session, oldest first.
func (t StoreTimeline) RecentTimeline(ctx context.Context, agent, sessionID string, n int) ([]string, error) {
	ms, err := t.Store.ListMemories(ctx, store.MemoryFilter{Agent: agent, Category: store.MemoryTimeline, SessionID: sessionID, Limit: n})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Content)
	}
	slices.Reverse(out)
	return out, nil
}
