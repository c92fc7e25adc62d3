package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// A session pod older than the gateway's message format for files (a
// rolling upgrade, or an Agent pinned to an older runtime image) must not
// answer the text and drop the files. The gateway stamps a message with
// files with the version that added them; here the runtime of this build
// plays the older pod by getting a message one version past its own, with
// files, as a pod from before files gets the gateway's. It refuses the
// message through real Redis, answers the next one, and the gateway turns
// the refusal into an error that says the runtime cannot take files and
// what to do.
func TestOlderRuntimeRefusesAMessageWithFilesClearly(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	f.llm.Script(fakellm.Turn{Text: "text only"})
	got := f.events(t, "helper/ann")
	ctx := context.Background()
	stream := chatStream(f.tenant, "helper", "web", "helper/ann")
	withFiles := fmt.Appendf(nil, `{"v":%d,"id":"helper/ann/1","channel":"web","chat_key":"helper/ann","text":"read this","files":[{"id":"art_1","name":"notes.md"}]}`,
		protocol.InboundVersion+1)
	plain, err := protocol.EncodeInbound(protocol.Inbound{ID: "helper/ann/2", Channel: "web", ChatKey: "helper/ann", Text: "and this?"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.bus.Publish(ctx, stream, bus.Message{ID: "helper/ann/1", Payload: withFiles}, bus.Message{ID: "helper/ann/2", Payload: plain})).To(Succeed())
	g.Expect(wake.Publish(ctx, f.bus, Wake{Tenant: f.tenant, Agent: "helper", Channel: "web", ChatKey: "helper/ann"})).To(Succeed())
	rt := f.runtime(t, "pod-a", 200*time.Millisecond, 3*time.Second)
	g.Expect(rt.Run(ctx)).To(Succeed())
	g.Eventually(func() []string { return kinds(got()) }, 10*time.Second).Should(ContainElement(protocol.FrameDone))

	var refused *protocol.Frame
	for _, e := range got() {
		if e.MessageID == "helper/ann/1" && e.Kind == protocol.FrameError {
			refused = &e
		}
	}
	g.Expect(refused).NotTo(BeNil())
	g.Expect(f.llm.Requests()).To(HaveLen(1), "the message with files never reached the model")
	g.Expect(f.llm.Requests()[0].Messages[0].Content).To(Equal("and this?"))

	// What the waiting gateway makes of the refusal of its message with
	// files.
	_, err, done := relay(received{Frame: *refused}, nil)
	g.Expect(done).To(BeTrue())
	err = filesRefused("helper", err)
	var coded *gateway.CodedError
	g.Expect(errors.As(err, &coded)).To(BeTrue())
	g.Expect(coded.Code).To(Equal(codeFilesUnsupported))
	g.Expect(coded.Status).To(Equal(http.StatusUnprocessableEntity))
	g.Expect(err).To(MatchError(And(
		ContainSubstring("the session runtime of agent helper is older than the gateway and cannot take attached files"),
		ContainSubstring(fmt.Sprintf("version %d (this build reads up to %d)", protocol.InboundVersion+1, protocol.InboundVersion)),
		ContainSubstring("send the message without files, or upgrade the Agent's runtime image"))))
}

// filesRefused explains only a runtime's refusal of the message; every
// other outcome of a send with files is left as it is.
func TestFilesRefusedLeavesOtherErrors(t *testing.T) {
	_, readErr, _ := relay(received{Frame: protocol.Frame{MessageID: "m"}, Err: fmt.Errorf("%w 3 (this build reads up to 2)", protocol.ErrUnknownVersion)}, nil)
	NewWithT(t).Expect(filesRefused("helper", nil)).To(Succeed())
	for name, err := range map[string]error{
		"a model error":                    &gateway.CodedError{Code: protocol.CodeModelRejected, Err: errors.New("unknown wire format version? no: 400")},
		"Redis down while queueing":        &gateway.CodedError{Code: gateway.CodeUnavailable, Err: errors.New("failed to queue message, so the message was not queued")},
		"a runtime newer than the gateway": readErr,
		"not coded":                        errors.New("unknown wire format version 3"),
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(filesRefused("helper", err)).To(BeIdenticalTo(err))
		})
	}
}
