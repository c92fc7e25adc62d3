package sessionrt

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// canvasReporter hands the canvas events of turns to the test.
type canvasReporter struct {
	reporter
	canvas chan turn.Event
}

func (p *canvasReporter) Event(_ context.Context, _ Chat, _ string, e turn.Event) {
	if e.Kind == turn.EventCanvas {
		p.canvas <- e
	}
}

// TestCanvasHost: a canvas command travels as a canvas event; eval and
// snapshot wait for the answer of their chat (another chat's answer, or an
// unknown id, reaches nothing), and fail clearly when none comes or the
// chat is not a web chat.
func TestCanvasHost(t *testing.T) {
	g := NewWithT(t)
	rep := &canvasReporter{reporter: *newReporter(), canvas: make(chan turn.Event, 10)}
	rt := New(Config{Reporter: rep})
	web := Chat{Channel: protocol.ChannelWeb, Key: "assistant/c1"}
	other := Chat{Channel: protocol.ChannelWeb, Key: "assistant/c2"}
	host := canvasHost{r: rt, c: web, msgID: "m1"}
	ctx := context.Background()

	_, err := host.Canvas(ctx, tool.CanvasCommand{Action: "present", SessionID: "s1"})
	g.Expect(err).NotTo(HaveOccurred())
	e := <-rep.canvas
	g.Expect(e.Canvas.Action).To(Equal("present"))
	g.Expect(e.Canvas.ID).To(BeEmpty(), "present waits for nothing")
	g.Expect(e.Session).To(Equal("s1"))

	type result struct {
		a   tool.CanvasAnswer
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := host.Canvas(ctx, tool.CanvasCommand{Action: "eval", JavaScript: "1+1", Wait: time.Minute})
		done <- result{a, err}
	}()
	e = <-rep.canvas
	g.Expect(e.Canvas.ID).To(HaveLen(24))
	g.Expect(e.Canvas.TimeoutMS).To(Equal(int64(60000)))
	g.Expect(rt.CanvasAnswer(other, e.Canvas.ID, tool.CanvasAnswer{Value: "forged"})).To(BeFalse(), "another chat's client")
	g.Expect(rt.CanvasAnswer(web, "nope", tool.CanvasAnswer{Value: "forged"})).To(BeFalse(), "an unknown id")
	g.Expect(rt.CanvasAnswer(web, e.Canvas.ID, tool.CanvasAnswer{Value: "2"})).To(BeTrue())
	r := <-done
	g.Expect(r.err).NotTo(HaveOccurred())
	g.Expect(r.a.Value).To(Equal("2"))
	g.Expect(rt.CanvasAnswer(web, e.Canvas.ID, tool.CanvasAnswer{Value: "again"})).To(BeFalse(), "answered already")

	_, err = host.Canvas(ctx, tool.CanvasCommand{Action: "snapshot", Wait: 50 * time.Millisecond})
	g.Expect(err).To(MatchError(ContainSubstring("no web client answered within 50ms: snapshot needs this chat open in PicoBot's web UI")))
	<-rep.canvas

	tg := canvasHost{r: rt, c: Chat{Channel: "telegram", Key: "42"}, msgID: "m2"}
	_, err = tg.Canvas(ctx, tool.CanvasCommand{Action: "present"})
	g.Expect(err).To(MatchError(ContainSubstring("this chat is on telegram, which has no canvas")))
	g.Expect(rep.canvas).To(BeEmpty())
}
