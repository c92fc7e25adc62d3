package metrics

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
)

// TestBusLabelsAreBounded: a stream's labels are its tenant and its kind,
// never the chat, run or agent its name also holds.
func TestBusLabelsAreBounded(t *testing.T) {
	for stream, want := range map[string][2]string{
		bus.Key("acme", "helper", "chat", "web", "u1/tab:2"): {"acme", StreamChat},
		bus.Key("acme", "helper", "wake"):                    {"acme", StreamWake},
		bus.Key("acme", "outbound"):                          {"acme", StreamOutbound},
		bus.Key("acme", "dead-letter"):                       {"acme", StreamDeadLetter},
		bus.Key("acme", "helper", "events", "web", "u1"):     {"acme", StreamOther},
		bus.Key("acme", "run-result", "r-123"):               {"acme", StreamOther},
		"not-a-key":                                          {"", StreamOther},
	} {
		tenant, kind := busLabels(stream)
		NewWithT(t).Expect([2]string{tenant, kind}).To(Equal(want), stream)
	}
}
