package bus_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
)

func TestQueuedTime(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 12, 6, 7, 0, 0, 123_000_000, time.UTC)
	got, ok := bus.Message{Headers: bus.QueuedAt(at)}.QueuedTime()
	g.Expect(ok).To(BeTrue())
	g.Expect(got.Equal(at)).To(BeTrue(), "%s", got)
	for _, h := range []map[string]string{nil, {bus.HeaderQueuedAt: ""}, {bus.HeaderQueuedAt: "soon"}, {bus.HeaderQueuedAt: "-5"}} {
		_, ok := bus.Message{Headers: h}.QueuedTime()
		g.Expect(ok).To(BeFalse(), "%v", h)
	}
}
