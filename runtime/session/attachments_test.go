package session

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

var (
	pngBytes = append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 24)...)
	pdfBytes = []byte("%PDF-1.4 test report")
)

// fileTools returns "snap", which returns a screenshot for the user and one
// for the model only, "report", which returns a PDF for the user, and
// "hold", which stops its own session's turn and waits for the stop.
func fileTools(m func() *Manager) []tool.Tool {
	snap := tool.New("snap", "Take a screenshot.", func(context.Context, tool.Env, struct{}) (tool.Result, error) {
		return tool.Result{Content: "Took a screenshot.", Artifacts: []tool.Artifact{
			{Name: "shot.png", MediaType: "image/png", Data: pngBytes, PresentToUser: true},
			{Name: "for-model.png", MediaType: "image/png", Data: pngBytes},
		}}, nil
	})
	report := tool.New("report", "Write a report.", func(context.Context, tool.Env, struct{}) (tool.Result, error) {
		return tool.Result{Content: "Wrote the report.", Artifacts: []tool.Artifact{
			{Name: "report [v2].pdf", MediaType: "application/pdf", Data: pdfBytes, PresentToUser: true},
		}}, nil
	})
	hold := tool.New("hold", "Wait until stopped.", func(ctx context.Context, env tool.Env, _ struct{}) (tool.Result, error) {
		m().Stop(env.SessionID) // the user presses stop while the tool runs
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	})
	return []tool.Tool{snap, report, hold}
}

// fileFixture is a session manager whose tools produce files, with a real
// artifact store (local blobs, SQLite records) when blobs is set.
func fileFixture(t *testing.T, blobs *localblob.Options, mutate ...func(*Config)) *fixture {
	t.Helper()
	var f *fixture
	f = newFixture(t, append([]func(*Config){func(c *Config) {
		reg, err := tool.NewRegistry(fileTools(func() *Manager { return f.m })...)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		c.Loop = &agent.Loop{Provider: c.Loop.Provider, Tools: reg, Images: agent.Images{Accept: true}}
		c.ArtifactURL = func(a store.Artifact) string { return "/api/v1/artifacts/" + a.ID }
		if blobs != nil {
			b, err := localblob.Open(filepath.Join(t.TempDir(), "blobs"), *blobs)
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = b.Close() })
			c.Artifacts = artifact.Store{Blobs: b, State: c.Store}
		}
	}}, mutate...)...)
	return f
}

// events records a turn's events.
type events struct {
	mu   sync.Mutex
	list []turn.Event
}

func (e *events) sink(ev turn.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) of(kind turn.EventKind) []turn.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []turn.Event
	for _, ev := range e.list {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func (e *events) text() string {
	var b strings.Builder
	for _, ev := range e.of(turn.EventDelta) {
		b.WriteString(ev.Text)
	}
	return b.String()
}

func TestToolFilesReachTheReplyAndTheHistory(t *testing.T) {
	g := NewWithT(t)
	f := fileFixture(t, &localblob.Options{})
	f.s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "snap"}}},
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c2", Name: "report"}}},
		fakellm.Turn{Text: "Here is the page and the report."},
		fakellm.Turn{Text: "You are welcome."},
	)
	ev := &events{}
	r, err := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "show me the shop", Stream: true, Sink: ev.sink})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Text).To(Equal("Here is the page and the report."), "the reply's text is the model's, without links")

	// Only the files presented to the user are stored, as the session's.
	arts, err := f.st.ListArtifacts(f.ctx, r.SessionID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(arts).To(HaveLen(2))
	g.Expect(arts[0].Name).To(Equal("shot.png"))
	g.Expect(arts[1].Name).To(Equal("report [v2].pdf"))
	shot := turn.Attachment{ID: arts[0].ID, Name: "shot.png", MediaType: "image/png", URL: "/api/v1/artifacts/" + arts[0].ID}
	pdf := turn.Attachment{ID: arts[1].ID, Name: "report [v2].pdf", MediaType: "application/pdf", URL: "/api/v1/artifacts/" + arts[1].ID}
	rc, a, err := f.m.cfg.Artifacts.(artifact.Store).Open(f.ctx, shot.ID)
	g.Expect(err).NotTo(HaveOccurred())
	data, err := io.ReadAll(rc)
	_ = rc.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(data).To(Equal(pngBytes))
	g.Expect(a.SessionID).To(Equal(r.SessionID))

	// Events: each tool result carries its files, the final event all of them.
	results := ev.of(turn.EventToolResult)
	g.Expect(results).To(HaveLen(2))
	g.Expect(results[0].Attachments).To(Equal([]turn.Attachment{shot}))
	g.Expect(results[0].ToolResult.Content).To(Equal("Took a screenshot."))
	g.Expect(results[1].Attachments).To(Equal([]turn.Attachment{pdf}))
	final := ev.of(turn.EventFinal)
	g.Expect(final).To(HaveLen(1))
	g.Expect(final[0].Text).To(Equal("Here is the page and the report."))
	g.Expect(final[0].Attachments).To(Equal([]turn.Attachment{shot, pdf}))
	g.Expect(r.Attachments).To(Equal([]turn.Attachment{shot, pdf}))

	// The history links them: in each tool result, and all in the reply.
	shotMD := "![shot.png](/api/v1/artifacts/" + shot.ID + ")"
	pdfMD := "[report _v2_.pdf](/api/v1/artifacts/" + pdf.ID + ")"
	msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var contents []string
	for _, m := range msgs {
		contents = append(contents, string(m.Role)+":"+m.Content)
	}
	g.Expect(contents).To(Equal([]string{
		"user:show me the shop",
		"assistant:",
		"tool:Took a screenshot.\n\n" + shotMD,
		"assistant:",
		"tool:Wrote the report.\n\n" + pdfMD,
		"assistant:Here is the page and the report.\n\n" + shotMD + "\n" + pdfMD,
	}))

	// Both images of the screenshot call (the one presented to the user
	// and the one kept for the model) are stored with its tool message,
	// and the model saw them in the step after it.
	g.Expect(msgs[2].Images).To(Equal([]llm.Image{{MediaType: "image/png", Data: pngBytes}, {MediaType: "image/png", Data: pngBytes}}))
	imagesIn := func(r fakellm.Recorded) (n int) {
		for _, m := range r.Messages {
			n += m.Images
		}
		return n
	}
	g.Expect(imagesIn(f.s.Requests()[1])).To(Equal(2))

	// The model sees the links, and the images, in later turns.
	f.say(t, "u1", "thanks")
	reqs := f.s.Requests()
	g.Expect(reqs).To(HaveLen(4))
	g.Expect(imagesIn(reqs[3])).To(Equal(2))
	sent := reqs[3].Messages
	g.Expect(sent[len(sent)-2].Content).To(Equal("Here is the page and the report.\n\n" + shotMD + "\n" + pdfMD))
	g.Expect(sent[len(sent)-1].Content).To(Equal("thanks"))
}

func TestFilesThatCannotBeStoredAreNamed(t *testing.T) {
	cases := []struct {
		name   string
		blobs  *localblob.Options
		mutate func(*Config)
		note   string
	}{
		{"no artifact store", nil, nil, "(shot.png was not attached: this runtime has no artifact store)"},
		{"empty artifact store", nil, func(c *Config) { c.Artifacts = artifact.Store{} },
			"(shot.png was not attached: failed to store artifact \"shot.png\": no artifact store is configured)"},
		{"blob store refuses", &localblob.Options{MaxObjectSize: 8}, nil, "(shot.png was not attached: failed to store artifact \"shot.png\": "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var mutate []func(*Config)
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			f := fileFixture(t, tc.blobs, mutate...)
			f.s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "snap"}}}, fakellm.Turn{Text: "Done."})
			ev := &events{}
			r, err := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "snap it", Sink: ev.sink})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Attachments).To(BeEmpty())
			res := ev.of(turn.EventToolResult)
			g.Expect(res).To(HaveLen(1))
			g.Expect(res[0].Attachments).To(BeEmpty())
			g.Expect(res[0].ToolResult.Content).To(HavePrefix("Took a screenshot.\n" + tc.note))
			g.Expect(ev.of(turn.EventFinal)[0].Attachments).To(BeEmpty())
			msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(msgs).To(HaveLen(4))
			g.Expect(msgs[2].Content).To(Equal(res[0].ToolResult.Content))
			g.Expect(msgs[3].Content).To(Equal("Done."))
			arts, err := f.st.ListArtifacts(f.ctx, r.SessionID)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(arts).To(BeEmpty())
		})
	}
}

func TestStoppedTurnKeepsItsPartialReply(t *testing.T) {
	g := NewWithT(t)
	f := fileFixture(t, &localblob.Options{})
	f.s.Script(fakellm.Turn{Text: strings.Repeat("slow ", 500), ChunkDelay: 20 * time.Millisecond})
	ev := &events{}
	stopped := make(chan Reply, 1)
	var once sync.Once
	r, err := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "talk a lot", Stream: true,
		Sink: func(e turn.Event) {
			ev.sink(e)
			if e.Kind == turn.EventDelta && strings.Count(ev.text(), "slow") >= 3 {
				once.Do(func() {
					go func() { // /stop arrives from another goroutine, like a client's
						sr, _ := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "/stop"})
						stopped <- sr
					}()
				})
			}
		}})
	g.Expect((<-stopped).Text).To(Equal("Stopped."))
	g.Expect(err).To(MatchError(context.Canceled))
	streamed := ev.text()
	g.Expect(strings.Count(streamed, "slow")).To(BeNumerically(">=", 3))
	g.Expect(len(streamed)).To(BeNumerically("<", len(strings.Repeat("slow ", 500))), "the stream was cut")

	msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(2))
	g.Expect(msgs[1].Role).To(Equal(llm.RoleAssistant))
	g.Expect(msgs[1].Content).To(Equal(strings.TrimSpace(streamed) + "\n\n" + StoppedMarker))

	// The next turn's model sees the cut answer, then the new message.
	f.s.Script(fakellm.Turn{Text: "Shorter then."})
	g.Expect(f.say(t, "u1", "be brief").Text).To(Equal("Shorter then."))
	reqs := f.s.Requests()
	sent := reqs[len(reqs)-1].Messages
	var roles []string
	for _, m := range sent {
		roles = append(roles, m.Role)
	}
	g.Expect(roles).To(Equal([]string{"system", "user", "assistant", "user"}))
	g.Expect(sent[2].Content).To(HaveSuffix("slow\n\n[stopped]"))
}

func TestTurnStoppedDuringAToolKeepsItsFilesAndChain(t *testing.T) {
	g := NewWithT(t)
	f := fileFixture(t, &localblob.Options{})
	f.s.Script(fakellm.Turn{Text: "Looking.", ToolCalls: []fakellm.Call{{ID: "c1", Name: "snap"}, {ID: "c2", Name: "hold"}, {ID: "c3", Name: "report"}}})
	ev := &events{}
	r, err := f.m.Handle(f.ctx, Inbound{Channel: "web", ChatID: "u1", Text: "look and wait", Stream: true, Sink: ev.sink})
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(r.Attachments).To(HaveLen(1))
	shotMD := "![shot.png](/api/v1/artifacts/" + r.Attachments[0].ID + ")"

	msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var contents []string
	var history []llm.Message
	for _, m := range msgs {
		contents = append(contents, string(m.Role)+":"+m.Content)
		history = append(history, m.ToLLM())
	}
	g.Expect(contents).To(Equal([]string{
		"user:look and wait",
		"assistant:Looking.",
		"tool:Took a screenshot.\n\n" + shotMD,
		"tool:error: hold was cancelled: context canceled",
		"tool:error: report was not run: the turn was cancelled",
		"assistant:[stopped]\n\n" + shotMD,
	}))
	g.Expect(agent.RepairToolChains(history)).To(Equal(history), "the stored chain is whole")
}

// A turn cut by a shutdown (the caller's context), not by the user, stores
// no reply: the redelivered message runs again on the next runtime.
func TestShutdownDoesNotMarkTheTurnStopped(t *testing.T) {
	g := NewWithT(t)
	f := fileFixture(t, &localblob.Options{})
	f.s.Script(fakellm.Turn{Text: strings.Repeat("slow ", 500), ChunkDelay: 20 * time.Millisecond})
	ctx, shutdown := context.WithCancel(f.ctx)
	defer shutdown()
	in := Inbound{Channel: "telegram", ChatID: "42", MessageID: "tg-9", Text: "talk", Stream: true}
	in.Sink = func(e turn.Event) {
		if e.Kind == turn.EventDelta {
			shutdown()
		}
	}
	r, err := f.m.Handle(ctx, in)
	g.Expect(err).To(MatchError(context.Canceled))
	msgs, err := f.st.LoadMessages(f.ctx, r.SessionID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(1), "only the user message")

	f.s.Script(fakellm.Turn{Text: "Here it is."})
	in.Sink = nil
	r, err = f.m.Handle(f.ctx, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Duplicate).To(BeFalse())
	g.Expect(r.Text).To(Equal("Here it is."))
}

func TestAttachmentMarkdown(t *testing.T) {
	cases := []struct {
		in   turn.Attachment
		want string
	}{
		{turn.Attachment{ID: "a1", Name: "shot.png", MediaType: "image/png", URL: "/api/v1/artifacts/a1"}, "![shot.png](/api/v1/artifacts/a1)"},
		{turn.Attachment{ID: "a2", Name: "x.svg", MediaType: "image/svg+xml", URL: "/u/a2"}, "[x.svg](/u/a2)"},
		{turn.Attachment{ID: "a3", Name: "a]b[\nc.txt", MediaType: "text/plain", URL: "/u/a3"}, "[a_b_c.txt](/u/a3)"},
		{turn.Attachment{ID: "a4", Name: "", URL: "/u/a4"}, "[file](/u/a4)"},
		{turn.Attachment{ID: "a5", Name: "n.bin"}, "n.bin (artifact a5)"},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(tc.in.Markdown()).To(Equal(tc.want))
	}
	NewWithT(t).Expect(stoppedText("  \n")).To(Equal(StoppedMarker))
	NewWithT(t).Expect(stoppedText("Half a thou ")).To(Equal("Half a thou\n\n" + StoppedMarker))
}

// BenchmarkPresentedFile measures what a presented file adds to a turn: the
// artifact saved (local blob + SQLite record), the event's reference, and
// the links in the stored messages.
func BenchmarkPresentedFile(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "picobot.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	blobs, err := localblob.Open(filepath.Join(b.TempDir(), "blobs"), localblob.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = blobs.Close() }()
	ctx := store.WithTenant(context.Background(), "team-a")
	m := NewManager(Config{Store: st, Artifacts: artifact.Store{Blobs: blobs, State: st},
		ArtifactURL: func(a store.Artifact) string { return "/api/v1/artifacts/" + a.ID }})
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 64<<10)...)
	out := &agent.Output{StopReason: agent.StopFinal, New: []llm.Message{
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "snap"}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Name: "snap", Content: "Took a screenshot."},
		{Role: llm.RoleAssistant, Content: "Here it is."}}}
	ev := turn.Event{Kind: turn.EventToolResult, ToolResult: &turn.ToolResult{CallID: "c1", Name: "snap", Content: "Took a screenshot.",
		Artifacts: []tool.Artifact{{Name: "shot.png", MediaType: "image/png", Data: png, PresentToUser: true}}}}
	b.SetBytes(int64(len(png)))
	for b.Loop() {
		files := m.newTurnFiles(ctx, "web:u1:default", nil)
		files.emit(ev)
		files.emit(turn.Event{Kind: turn.EventFinal, Text: "Here it is."})
		if msgs := files.messages(out, false); !strings.Contains(msgs[2].Content, "shot.png") {
			b.Fatalf("reply without the file: %q", msgs[2].Content)
		}
	}
}
