package outbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

const agentName = "bot"

// answer is a scripted reply of a fake platform.
type answer struct {
	status int
	header map[string]string
	body   string
	hang   bool // block until the client gives up
}

// platform is a local fake of a chat platform's send API (the generic
// webhook receiver and Telegram's sendMessage/sendDocument): it records
// what it received, at which (fake) time, and answers from a script, then
// with success.
type platform struct {
	*httptest.Server
	clock *clocktesting.FakeClock

	mu     sync.Mutex
	script []answer
	got    []received
}

type received struct {
	Method string
	At     time.Time
	Body   string
	Header http.Header
}

func newPlatform(t testing.TB, clk *clocktesting.FakeClock) *platform {
	p := &platform{clock: clk}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.got = append(p.got, received{Method: path.Base(r.URL.Path), At: clk.Now(), Body: string(body), Header: r.Header.Clone()})
		a := answer{status: 200, body: fmt.Sprintf(`{"ok":true,"message_id":"m%d","result":{"message_id":%d}}`, len(p.got), len(p.got))}
		if len(p.script) > 0 {
			a, p.script = p.script[0], p.script[1:]
		}
		p.mu.Unlock()
		if a.hang {
			<-r.Context().Done()
			return
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *platform) then(a ...answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script = append(p.script, a...)
}

func (p *platform) received() []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]received(nil), p.got...)
}

// fakeWeb is the host's WebSink: it appends the message to the session as
// the embedded runtime would, and can fail.
type fakeWeb struct {
	st   store.Store
	mu   sync.Mutex
	fail int
	got  []WebMessage
}

func (f *fakeWeb) DeliverWeb(ctx context.Context, m WebMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return errors.New("session store unavailable")
	}
	f.got = append(f.got, m)
	_, err := f.st.AppendMessages(ctx, m.SessionID, store.Message{ID: m.MessageID, Role: llm.RoleAssistant, Content: m.Text})
	return err
}

// world is a Dispatcher over a real store and a real channel.Manager whose
// channels talk HTTP to local fakes.
type world struct {
	st    store.Store
	ctx   context.Context
	clock *clocktesting.FakeClock
	hook  *platform // generic webhook channel "tickets"
	tg    *platform // Telegram channel "telegram"
	web   *fakeWeb
	d     *Dispatcher
	waits chan time.Duration
	arts  artifact.Store
}

func newWorld(ctx context.Context, t testing.TB, st store.Store) *world {
	t.Helper()
	g := NewWithT(t)
	tenant, _ := store.TenantFrom(ctx)
	w := &world{st: st, ctx: ctx, clock: clocktesting.NewFakeClock(time.Now()), waits: make(chan time.Duration, 100)}
	w.hook, w.tg = newPlatform(t, w.clock), newPlatform(t, w.clock)
	w.web = &fakeWeb{st: st}
	mgr := channel.NewManager(channel.Options{Clock: w.clock, BaseURLs: channel.BaseURLs{Telegram: w.tg.URL},
		Log: slog.New(slog.DiscardHandler)})
	agent := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: agentName}, Spec: picobotv1alpha1.AgentSpec{
		Channels: []picobotv1alpha1.Channel{
			{Type: "webhook", Name: "tickets", SecretRef: &corev1.LocalObjectReference{Name: "wh"}},
			{Type: "telegram", SecretRef: &corev1.LocalObjectReference{Name: "tg"}},
			{Type: "web"},
		}}}
	g.Expect(mgr.SetAgent(tenant, agent, func(name string) *corev1.Secret {
		switch name {
		case "wh":
			return &corev1.Secret{Data: map[string][]byte{channel.KeyWebhookSigningSecret: []byte("s"), channel.KeyWebhookURL: []byte(w.hook.URL + "/inbox")}}
		case "tg":
			return &corev1.Secret{Data: map[string][]byte{channel.KeyTelegramToken: []byte("1:x")}}
		}
		return nil
	})).To(Succeed())
	blobs, err := localblob.Open(filepath.Join(t.TempDir(), "blobs"), localblob.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	w.arts = artifact.Store{Blobs: blobs, State: st}
	w.d, err = New(Config{Store: st, Channels: mgr, Web: w.web, Artifacts: w.arts, Clock: w.clock,
		Rand: func() float64 { return 1 }, Log: slog.New(slog.DiscardHandler)})
	g.Expect(err).NotTo(HaveOccurred())
	w.d.onSleep = func(d time.Duration) { w.waits <- d }
	return w
}

// deliver runs Deliver in the background; the test drives the clock.
func (w *world) deliver(m Message) chan outcome {
	out := make(chan outcome, 1)
	go func() {
		r, err := w.d.Deliver(w.ctx, m)
		out <- outcome{r, err}
	}()
	return out
}

type outcome struct {
	res Result
	err error
}

// nextWait waits for the dispatcher to sleep, returns the wait, and lets the
// (fake) time pass.
func (w *world) nextWait(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-w.waits:
		w.clock.Step(d)
		return d
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("the dispatcher did not wait for a retry")
		return 0
	}
}

func TestDeliverDelivered(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		res, err := w.d.Deliver(ctx, Message{Agent: agentName, Target: "tickets:T-1", Text: "Ticket summarised.", Origin: "web:bot/c1:default"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status).To(Equal(store.DeliveryDelivered))
		g.Expect(res.Attempts).To(Equal(1))
		g.Expect(res.SessionID).To(Equal("tickets:T-1:default"))
		g.Expect(res.Receipt.MessageIDs).To(Equal([]string{"m1"}))

		got := w.hook.received()
		g.Expect(got).To(HaveLen(1))
		g.Expect(got[0].Body).To(MatchJSON(`{"chat_id":"T-1","text":"Ticket summarised.","files":[]}`))
		g.Expect(got[0].Header.Get(channel.HeaderPicoBotSignature)).To(HavePrefix("sha256="))

		del, err := st.GetDelivery(ctx, res.DeliveryID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(del.Status).To(Equal(store.DeliveryDelivered))
		g.Expect(del.Attempts).To(Equal(1))
		g.Expect(del.DeliveredAt).NotTo(BeNil())
		g.Expect(del).To(And(HaveField("Channel", "tickets"), HaveField("ChatID", "T-1"), HaveField("SessionID", "tickets:T-1:default")))

		// The message is in the chat's session, so a reply there has context.
		s, err := st.GetSession(ctx, "tickets:T-1:default")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.Agent).To(Equal(agentName))
		msgs, err := st.LoadMessages(ctx, res.SessionID, store.LoadOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(msgs).To(HaveLen(1))
		g.Expect(msgs[0].Role).To(Equal(llm.RoleAssistant))
		g.Expect(msgs[0].Content).To(Equal("Ticket summarised."))
		g.Expect(msgs[0].Meta).To(Equal(map[string]string{MetaDelivery: res.DeliveryID, MetaAgent: agentName, MetaOrigin: "web:bot/c1:default"}))
	})
}

func TestDeliverRetriesTransientFailures(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		w.hook.then(
			answer{status: 429, header: map[string]string{"Retry-After": "7"}, body: "slow down"},
			answer{status: 503, body: "maintenance"},
			answer{status: 502, body: "bad gateway"},
		)
		done := w.deliver(Message{Agent: agentName, Target: "tickets:T-2", Text: "hello"})
		g.Expect(w.nextWait(t)).To(Equal(7*time.Second), "Retry-After is honoured")
		g.Expect(w.nextWait(t)).To(Equal(2*time.Second), "then exponential backoff")
		g.Expect(w.nextWait(t)).To(Equal(4 * time.Second))
		o := <-done
		g.Expect(o.err).NotTo(HaveOccurred())
		g.Expect(o.res.Status).To(Equal(store.DeliveryDelivered))
		g.Expect(o.res.Attempts).To(Equal(4))

		got := w.hook.received()
		g.Expect(got).To(HaveLen(4))
		g.Expect(got[1].At.Sub(got[0].At)).To(Equal(7 * time.Second))
		g.Expect(got[3].At.Sub(got[2].At)).To(Equal(4 * time.Second))
		del, err := st.GetDelivery(ctx, o.res.DeliveryID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(del.Status).To(Equal(store.DeliveryDelivered))
		g.Expect(del.Attempts).To(Equal(4))
		g.Expect(del.LastError).To(ContainSubstring("502"))
	})
}

func TestDeliverPermanentFailureIsReportedAsFailed(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		w.hook.then(answer{status: 404, body: "no such ticket"})
		res, err := w.d.Deliver(ctx, Message{Agent: agentName, Target: "tickets:T-404", Text: "hello"})
		var de *DeliveryError
		g.Expect(errors.As(err, &de)).To(BeTrue())
		g.Expect(err).To(MatchError(ContainSubstring("no such ticket")))
		g.Expect(res.Status).To(Equal(store.DeliveryFailed))
		g.Expect(res.Attempts).To(Equal(1), "a permanent error is not retried")
		del, err := st.GetDelivery(ctx, res.DeliveryID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(del.Status).To(Equal(store.DeliveryFailed))
		g.Expect(del.DeliveredAt).To(BeNil())
		g.Expect(del.LastError).To(ContainSubstring("HTTP 404"))
	})
}

func TestDeliverGivesUpWithinMaxWait(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		for range 20 {
			w.hook.then(answer{status: 503, body: "down"})
		}
		start := w.clock.Now()
		done := w.deliver(Message{Agent: agentName, Target: "tickets:T-3", Text: "hello"})
		var waits []time.Duration
		for {
			select {
			case o := <-done:
				g.Expect(o.err).To(MatchError(ContainSubstring("gave up: no delivery within 2m0s")))
				g.Expect(o.res.Status).To(Equal(store.DeliveryFailed))
				// 1+2+4+8+16+30+30 s of waits fit in 120 s; the next would not.
				g.Expect(waits).To(Equal([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
					16 * time.Second, 30 * time.Second, 30 * time.Second}))
				g.Expect(o.res.Attempts).To(Equal(8))
				g.Expect(w.clock.Since(start)).To(BeNumerically("<", DefaultMaxWait))
				del, err := st.GetDelivery(ctx, o.res.DeliveryID)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(del.Status).To(Equal(store.DeliveryFailed))
				g.Expect(del.Attempts).To(Equal(8))
				return
			case d := <-w.waits:
				waits = append(waits, d)
				w.clock.Step(d)
			case <-time.After(30 * time.Second):
				t.Fatal("hang guard")
			}
		}
	})
}

func TestDeliverCapsAHangingSendAt120s(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		w.hook.then(answer{hang: true})
		done := w.deliver(Message{Agent: agentName, Target: "tickets:T-4", Text: "hello"})
		g.Eventually(func() int { return len(w.hook.received()) }).Should(Equal(1))
		g.Eventually(w.clock.HasWaiters).Should(BeTrue())
		w.clock.Step(DefaultMaxWait - time.Second)
		g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive(), "still waiting inside the cap")
		w.clock.Step(time.Second)
		var o outcome
		g.Eventually(done).Should(Receive(&o))
		g.Expect(o.err).To(MatchError(ContainSubstring("gave up: no delivery within 2m0s")))
		g.Expect(o.res.Status).To(Equal(store.DeliveryFailed))
		del, err := st.GetDelivery(ctx, o.res.DeliveryID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(del.Status).To(Equal(store.DeliveryFailed), "never left as pending nor reported delivered")
	})
}

func TestDeliverDoesNotRepeatDeliveredParts(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		w.tg.then(answer{status: 200, body: `{"ok":true,"result":{"message_id":11}}`},
			answer{status: 500, body: `{"ok":false,"error_code":500,"description":"Internal Server Error"}`})
		done := w.deliver(Message{Agent: agentName, Target: "telegram:42", Text: "the report",
			Files: []channel.File{{Name: "a.pdf", MediaType: "application/pdf", Data: []byte("A")}, {Name: "b.pdf", Data: []byte("B")}}})
		w.nextWait(t)
		o := <-done
		g.Expect(o.err).NotTo(HaveOccurred())
		var methods []string
		for _, r := range w.tg.received() {
			methods = append(methods, r.Method)
		}
		g.Expect(methods).To(Equal([]string{"sendMessage", "sendDocument", "sendDocument", "sendDocument"}),
			"the text went once; the failed file again; then the rest")
		// The attachments are stored as artifacts of the target session.
		arts, err := st.ListArtifacts(ctx, o.res.SessionID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(arts).To(HaveLen(2))
		msgs, err := st.LoadMessages(ctx, o.res.SessionID, store.LoadOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(msgs[0].Content).To(Equal("the report\n\n[attachments: a.pdf, b.pdf]"))
		g.Expect(msgs[0].Meta[MetaFiles]).To(Equal(arts[0].ID + "," + arts[1].ID))
	})
}

func TestDeliverToGatewayClients(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		w.web.fail = 1
		done := w.deliver(Message{Agent: agentName, Target: "web:bot/alice", Text: "Your report is ready.",
			Files: []channel.File{{Name: "r.png", MediaType: "image/png", Data: []byte("PNG")}}, Origin: "cron:daily"})
		g.Expect(w.nextWait(t)).To(Equal(time.Second), "a failing sink is retried")
		o := <-done
		g.Expect(o.err).NotTo(HaveOccurred())
		g.Expect(o.res.SessionID).To(Equal("web:bot/alice:default"))
		g.Expect(w.web.got).To(HaveLen(1))
		m := w.web.got[0]
		g.Expect(m.SessionID).To(Equal("web:bot/alice:default"))
		g.Expect(m.Origin).To(Equal("cron:daily"))
		g.Expect(m.Artifacts).To(HaveLen(1))
		g.Expect(m.Artifacts[0].Name).To(Equal("r.png"))
		// The sink's append with the same id stored nothing twice.
		n, err := st.CountMessages(ctx, "web:bot/alice:default")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeEquivalentTo(1))

		// An existing dialog can be named; a missing one cannot.
		_, err = w.d.Deliver(ctx, Message{Agent: agentName, Target: "web:bot/alice:default", Text: "again"})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = w.d.Deliver(ctx, Message{Agent: agentName, Target: "web:bot/alice:d_nope", Text: "x"})
		g.Expect(err).To(MatchError(ErrBadTarget))
		g.Expect(err).To(MatchError(ContainSubstring(`no dialog "d_nope" in chat web:bot/alice`)))
	})
}

func TestDeliverRefusesBadInputBeforeRecording(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		w := newWorld(ctx, t, st)
		for _, tc := range []struct {
			m    Message
			want error
			msg  string
		}{
			{Message{Agent: agentName, Target: "fax:123", Text: "x"}, ErrUnknownChannel, "its channels: telegram, tickets"},
			{Message{Agent: agentName, Target: "tickets", Text: "x"}, ErrBadTarget, "no channel"},
			{Message{Agent: agentName, Target: "tickets:", Text: "x"}, ErrBadTarget, "no chat id"},
			{Message{Agent: agentName, Target: "tickets:a:", Text: "x"}, ErrBadTarget, "empty dialog id"},
			{Message{Agent: agentName, Target: "tickets:a\nb", Text: "x"}, ErrBadTarget, "control characters"},
			{Message{Agent: agentName, Target: "tickets:T-1", Text: "  "}, nil, "no text and no files"},
			{Message{Agent: agentName, Target: "tickets:T-1", Text: strings.Repeat("x", MaxTextBytes+1)}, nil, "byte limit"},
		} {
			g := NewWithT(t)
			_, err := w.d.Deliver(ctx, tc.m)
			g.Expect(err).To(MatchError(ContainSubstring(tc.msg)), "%+v", tc.m.Target)
			if tc.want != nil {
				g.Expect(err).To(MatchError(tc.want))
			}
		}
		g := NewWithT(t)
		_, err := w.d.Deliver(context.Background(), Message{Agent: agentName, Target: "tickets:T-1", Text: "x"})
		g.Expect(err).To(MatchError(store.ErrNoTenant))
		dels, err := st.ListDeliveries(ctx, store.DeliveryFilter{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(dels).To(BeEmpty(), "nothing recorded")
		g.Expect(w.hook.received()).To(BeEmpty())
	})
}

func TestResumeRetriesWhatACrashLeftPending(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store, ctx context.Context) {
		g := NewWithT(t)
		w := newWorld(ctx, t, st)
		// A dispatcher that died mid-delivery left these behind: one with
		// its message and an attachment, one whose message never got stored.
		art, err := w.arts.Save(ctx, "tickets:T-9:default", "sum.txt", "text/plain", []byte("summary"))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = st.CreateSession(ctx, store.Session{Channel: "tickets", ChatID: "T-9", DialogID: "default", Agent: agentName})
		g.Expect(err).NotTo(HaveOccurred())
		crashed, err := st.CreateDelivery(ctx, store.Delivery{ID: "d-crashed", Channel: "tickets", ChatID: "T-9", SessionID: "tickets:T-9:default"})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = st.AppendMessages(ctx, "tickets:T-9:default", store.Message{ID: "out_d-crashed", Role: llm.RoleAssistant,
			Content: "resend me\n\n[attachments: sum.txt]", CreatedAt: crashed.CreatedAt,
			Meta: map[string]string{MetaDelivery: "d-crashed", MetaAgent: agentName, MetaFiles: art.ID}})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = st.CreateDelivery(ctx, store.Delivery{ID: "d-lost", Channel: "tickets", ChatID: "T-9", SessionID: "tickets:T-9:default"})
		g.Expect(err).NotTo(HaveOccurred())

		// Right after the crash both may still be in flight elsewhere: untouched.
		n, err := w.d.Resume(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeZero())
		g.Expect(w.hook.received()).To(BeEmpty())

		w.clock.Step(DefaultMaxWait + time.Second)
		n, err = w.d.Resume(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(Equal(2))
		got := w.hook.received()
		g.Expect(got).To(HaveLen(1))
		var body struct {
			ChatID string `json:"chat_id"`
			Text   string `json:"text"`
			Files  []struct {
				Name string `json:"name"`
				Data []byte `json:"data"`
			} `json:"files"`
		}
		g.Expect(json.Unmarshal([]byte(got[0].Body), &body)).To(Succeed())
		g.Expect(body.ChatID).To(Equal("T-9"))
		g.Expect(body.Text).To(Equal("resend me"))
		g.Expect(body.Files).To(HaveLen(1))
		g.Expect(string(body.Files[0].Data)).To(Equal("summary"))

		del, err := st.GetDelivery(ctx, "d-crashed")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(del.Status).To(Equal(store.DeliveryDelivered))
		lost, err := st.GetDelivery(ctx, "d-lost")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lost.Status).To(Equal(store.DeliveryFailed))
		g.Expect(lost.LastError).To(ContainSubstring("cannot be resent"))

		n, err = w.d.Resume(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeZero(), "nothing pending any more")
	})
}

func TestParseTarget(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]Target{
		"telegram:123":               {Channel: "telegram", ChatID: "123"},
		"telegram:-100123:d_abc":     {Channel: "telegram", ChatID: "-100123", DialogID: "d_abc"},
		" feishu:oc_abc ":            {Channel: "feishu", ChatID: "oc_abc"},
		"web:bot/alice:default":      {Channel: "web", ChatID: "bot/alice", DialogID: "default"},
		"slack:C1:with:colons:d_xyz": {Channel: "slack", ChatID: "C1:with:colons", DialogID: "d_xyz"},
	} {
		got, err := ParseTarget(in)
		g.Expect(err).NotTo(HaveOccurred(), in)
		g.Expect(got).To(Equal(want), in)
	}
	for _, in := range []string{"", ":123", "telegram", "telegram:", "telegram::", "a:b:", strings.Repeat("x", 600)} {
		_, err := ParseTarget(in)
		g.Expect(err).To(MatchError(ErrBadTarget), "%q", in)
	}
}
