package tui

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/device"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(embeddedtest.LeakOptions(),
		// The input cursor's blink command waits out one blink interval
		// (530 ms) and then ends by itself; a loaded machine may still be
		// in it when the last test returns.
		goleak.IgnoreAnyFunction("github.com/charmbracelet/bubbles/cursor.(*Model).BlinkCmd.func1"),
		// The code highlighter's regexp engine keeps a coarse clock for
		// match timeouts, which stops by itself a while after the last use.
		goleak.IgnoreAnyFunction("github.com/dlclark/regexp2.runClock"),
	)...)
}

func TestTranscriptStreamsAndCollapsesTools(t *testing.T) {
	g := NewWithT(t)
	var tr transcript
	tr.add(entry{kind: entryUser, text: "what is 6*7?"})
	for _, e := range []client.Event{
		{Kind: client.KindDelta, Text: "Let me "},
		{Kind: client.KindDelta, Text: "compute."},
		{Kind: client.KindToolCall, CallID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{Kind: client.KindToolCall, CallID: "c2", Name: "todo", Arguments: `{"action":"list"}`},
		{Kind: client.KindToolResult, CallID: "c1", Name: "calculator", Content: "42"},
		{Kind: client.KindToolResult, CallID: "c2", Name: "todo", Content: "no such\nlist", IsError: true},
		{Kind: client.KindUsage, InputTokens: 10, OutputTokens: 2},
		{Kind: "attachment", Text: "report.pdf"},
		{Kind: "progress"}, // unknown and without text: nothing to show
		{Kind: client.KindDelta, Text: "It is "},
	} {
		tr.apply(e)
	}
	view := ansi.Strip(strings.Join(tr.lines(60, "bot", false, nil), "\n"))
	g.Expect(view).To(ContainSubstring("You\nwhat is 6*7?"))
	g.Expect(view).To(ContainSubstring("bot\nLet me compute.\n"))
	g.Expect(view).To(ContainSubstring(`  ▸ calculator {"expression":"6*7"} → 42` + "\n" + `  ▸ todo {"action":"list"} ✗ no such list`))
	g.Expect(view).To(ContainSubstring("[attachment] report.pdf"))
	g.Expect(view).To(HaveSuffix("bot\nIt is ▍"), "the reply still streaming shows a cursor")
	g.Expect(view).NotTo(ContainSubstring("progress"))

	tr.apply(client.Event{Kind: client.KindFinal, Text: "It is 42."})
	view = ansi.Strip(strings.Join(tr.lines(60, "bot", true, nil), "\n"))
	g.Expect(view).To(HaveSuffix("bot\nIt is 42."))
	g.Expect(view).To(ContainSubstring("  ▾ calculator (c1)\n    arguments\n      {\"expression\":\"6*7\"}\n    result\n      42\n"))
	g.Expect(view).To(ContainSubstring("    error\n      no such\n      list\n"))

	// A collapsed tool line never wraps, however long its arguments.
	tr.apply(client.Event{Kind: client.KindToolCall, CallID: "c3", Name: "web_fetch", Arguments: strings.Repeat("x", 500)})
	last := strings.Split(ansi.Strip(strings.Join(tr.lines(40, "bot", false, nil), "\n")), "\n")
	g.Expect(last[len(last)-1]).To(HavePrefix("  ▸ web_fetch xxx"))
	g.Expect(ansi.StringWidth(last[len(last)-1])).To(Equal(40))
}

func TestTranscriptFromHistory(t *testing.T) {
	g := NewWithT(t)
	tr := fromHistory([]client.Message{
		{Role: "system", Content: "secret prompt"},
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []client.ToolCall{{ID: "c1", Name: "calculator", Arguments: "{}"}}},
		{Role: "tool", ToolCallID: "c1", Name: "calculator", Content: "expression is required", IsError: true},
		{Role: "assistant", Content: "Sorry."},
		{Role: "user", Content: "summarise", Error: &client.Error{Code: "model_rejected", Message: "too long"}},
	}, func(err error) string { return "explained " + err.Error() })
	view := ansi.Strip(strings.Join(tr.lines(80, "bot", false, nil), "\n"))
	g.Expect(view).To(HavePrefix("You\nhi\n\n  ▸ calculator {} ✗ expression is required\n\nbot\nSorry.\n\nYou\nsummarise\n"))
	g.Expect(view).To(HaveSuffix("explained model_rejected: too long"), "a failed turn's error, worded as live")
}

// A finished answer is drawn as markdown; while it streams it is plain.
func TestTranscriptDrawsMarkdown(t *testing.T) {
	g := NewWithT(t)
	answer := "## Plan\n\nIt is **42**, see `calc`.\n\n| city | km |\n|---|---|\n| Oslo | 12 |\n\n```go\nfmt.Println(42)\n```\n"
	var tr transcript
	tr.apply(client.Event{Kind: client.KindDelta, Text: answer})
	md := newMarkdown("dark")
	streaming := ansi.Strip(strings.Join(tr.lines(60, "bot", false, md), "\n"))
	g.Expect(streaming).To(ContainSubstring("It is **42**"), "plain while streaming")

	tr.apply(client.Event{Kind: client.KindFinal, Text: answer})
	lines := tr.lines(60, "bot", false, md)
	view := ansi.Strip(strings.Join(lines, "\n"))
	g.Expect(view).To(HavePrefix("bot\n"))
	g.Expect(view).To(MatchRegexp(`It is 42, see +calc`), "emphasis and code drawn, not shown as markup")
	g.Expect(view).NotTo(ContainSubstring("|---|"), "a table drawn, not shown as markup")
	g.Expect(view).NotTo(ContainSubstring("```"), "a fence drawn, not shown as markup")
	g.Expect(view).To(MatchRegexp(`Oslo\s+│\s+12`))
	g.Expect(view).To(ContainSubstring("fmt.Println(42)"))
	for _, l := range lines {
		g.Expect(ansi.StringWidth(l)).To(BeNumerically("<=", 60), "%q", l)
		g.Expect(ansi.Strip(l)).NotTo(HaveSuffix(" "), "no padding to the margin")
	}

	// Plain words stay as they are, in line with the rest of the transcript.
	var short transcript
	short.apply(client.Event{Kind: client.KindFinal, Text: "Just words, nothing marked."})
	g.Expect(ansi.Strip(strings.Join(short.lines(60, "bot", false, md), "\n"))).To(Equal("bot\nJust words, nothing marked."))

	// Without colours (NO_COLOR) the markers stay, the table is still aligned.
	plain := ansi.Strip(strings.Join(tr.lines(60, "bot", false, newMarkdown("notty")), "\n"))
	g.Expect(plain).To(ContainSubstring("It is **42**"))
	g.Expect(plain).To(MatchRegexp(`Oslo\s+\|\s+12`))
}

// driver runs a Model the way tea.Program does, without a terminal: every
// command runs in its own goroutine and its message is fed back to Update.
type driver struct {
	t    *testing.T
	m    tea.Model
	msgs chan tea.Msg
	done chan struct{}
	quit bool
}

func drive(t *testing.T, m Model) *driver {
	d := &driver{t: t, m: m, msgs: make(chan tea.Msg, 64), done: make(chan struct{})}
	t.Cleanup(func() {
		close(d.done)
		d.m.(Model).Close()
	})
	d.update(tea.WindowSizeMsg{Width: 100, Height: 30})
	d.run(m.Init())
	return d
}

func (d *driver) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		msg := cmd()
		select {
		case d.msgs <- msg:
		case <-d.done:
		}
	}()
}

func (d *driver) update(msg tea.Msg) {
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			d.run(c)
		}
	case tea.QuitMsg:
		d.quit = true
	default:
		var cmd tea.Cmd
		d.m, cmd = d.m.Update(msg)
		d.run(cmd)
	}
}

func (d *driver) view() string { return screen(d.m) }

// screen is the model's view as plain text, without trailing blanks.
func screen(m tea.Model) string {
	lines := strings.Split(ansi.Strip(m.View()), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// until feeds messages to the model until cond holds for its view.
func (d *driver) until(what string, cond func(view string) bool) {
	d.t.Helper()
	deadline := time.After(20 * time.Second) // hang guard only
	for !cond(d.view()) {
		select {
		case msg := <-d.msgs:
			d.update(msg)
		case <-deadline:
			d.t.Fatalf("timed out waiting for %s; screen:\n%s", what, d.view())
		}
	}
}

func (d *driver) shows(s string) {
	d.t.Helper()
	d.until("the screen to show "+s, func(v string) bool { return strings.Contains(v, s) })
}

func (d *driver) typeText(s string) {
	d.update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)})
}

func (d *driver) key(k tea.KeyType) { d.update(tea.KeyMsg{Type: k}) }

func (d *driver) say(s string) {
	d.typeText(s)
	d.key(tea.KeyEnter)
}

// idle waits until no message is on its way or running.
func (d *driver) idle() {
	d.t.Helper()
	d.until("the turn to end", func(string) bool { return !d.m.(Model).busy() })
}

func start(t *testing.T, opts embeddedtest.Options, agent string) (*embeddedtest.Env, *driver) {
	env := embeddedtest.Start(t, opts)
	c, err := client.New(env.URL, client.Options{APIKey: opts.APIKey})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	agents, err := c.Agents(t.Context())
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return env, drive(t, New(Config{Client: c, Agents: agents, Agent: agent, ChatID: "tui"}))
}

func TestChatAgainstGateway(t *testing.T) {
	g := NewWithT(t)
	env, d := start(t, embeddedtest.Options{}, "")
	d.shows("● online")
	g.Expect(d.view()).To(ContainSubstring("PicoBot │ assistant │ new conversation"))

	env.LLM.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_1", Name: "calculator", Args: `{"function":"evaluate","expression":"6*7"}`}}},
		fakellm.Turn{Text: "The answer is 42."},
	)
	d.say("what is 6*7?")
	g.Expect(d.view()).To(ContainSubstring("You\nwhat is 6*7?"))
	g.Expect(d.view()).To(ContainSubstring("Sending…"))
	d.shows("assistant\nThe answer is 42.")
	g.Expect(d.view()).To(ContainSubstring(`▸ calculator {"function":"evaluate","expression":"6*7"} → 42`))
	d.shows("│ what is 6*7? (default)") // titled by its first request, the list refreshed after the turn
	d.idle()
	g.Expect(d.view()).To(MatchRegexp(`\d+ in / \d+ out tokens`))

	// /dump's link opens from the terminal: the gateway's address in front.
	d.say("/dump")
	d.shows("Saved ")
	d.idle()
	entries := d.m.(Model).log.entries
	g.Expect(entries[len(entries)-1].text).To(MatchRegexp(`\]\(http://127\.0\.0\.1:\d+/api/v1/artifacts/[^)]+\)$`))
	g.Expect(d.view()).NotTo(ContainSubstring("out tokens"), "the token line is the last turn's, and /dump had none")

	d.key(tea.KeyCtrlO)
	g.Expect(d.view()).To(ContainSubstring("▾ calculator (call_1)"))
	d.key(tea.KeyCtrlO)
	g.Expect(d.view()).NotTo(ContainSubstring("▾ calculator"))

	d.say("/new")
	d.shows("Started a new conversation (d_")
	d.idle()
	d.until("a fresh transcript", func(v string) bool { return !strings.Contains(v, "The answer is 42.") })
	g.Expect(d.view()).NotTo(ContainSubstring("(default)"))

	d.say("/sessions")
	d.shows("Recent conversations:")
	d.idle()
	g.Expect(d.view()).To(MatchRegexp(`\*\s+d_\w+\s+New conversation`))
	g.Expect(d.view()).To(MatchRegexp(`\n\s+default\s+what is 6\*7\?`), "titled by its first request")

	d.say("/switch default")
	d.shows("Switched to default")
	d.shows("The answer is 42.") // the dialog's history is back
	d.shows("│ what is 6*7? (default)")
	g.Expect(d.view()).To(ContainSubstring("/switch default\n\nSwitched to default"), "the command stays under the history")
}

func TestChatStopsARunningReplyAndQuitsWhenIdle(t *testing.T) {
	g := NewWithT(t)
	env, d := start(t, embeddedtest.Options{}, "assistant")
	d.shows("● online")
	env.LLM.Script(fakellm.Turn{Text: "slow", Delay: time.Minute})
	d.say("take your time")
	d.shows("assistant is replying")
	g.Eventually(func() int { return len(env.LLM.Requests()) }).WithTimeout(20 * time.Second).Should(Equal(1))

	// Typing while a reply runs keeps the text and says why.
	d.say("another")
	g.Expect(d.view()).To(ContainSubstring("A reply is still running"))
	g.Expect(d.m.(Model).input.Value()).To(Equal("another"))

	d.key(tea.KeyCtrlC)
	g.Expect(d.view()).To(ContainSubstring("Stopping…"))
	d.shows("Stopped; what was done so far is kept.")
	g.Expect(d.quit).To(BeFalse())

	d.key(tea.KeyCtrlC)
	d.until("quit", func(string) bool { return d.quit })
}

func TestChatReconnectsAfterTheGatewayWentAway(t *testing.T) {
	g := NewWithT(t)
	env := embeddedtest.Start(t, embeddedtest.Options{})
	env.LLM.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "pong"} })
	proxy := embeddedtest.NewProxy(t, env.Server.Listener.Addr().String())
	c, err := client.New(proxy.URL(), client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	d := drive(t, New(Config{Client: c, Agent: "assistant", ChatID: "tui"}))
	d.say("ping")
	d.shows("assistant\npong")
	d.idle()

	proxy.Cut()
	d.shows("Lost the connection to the gateway")
	g.Expect(d.view()).To(ContainSubstring("○ offline"))

	d.say("ping again")
	d.shows("You\nping again\n\nassistant\npong")
	g.Expect(d.view()).To(ContainSubstring("● online"))
	g.Expect(d.view()).NotTo(ContainSubstring("Lost the connection"))
}

func TestChatShowsGatewayErrors(t *testing.T) {
	g := NewWithT(t)
	_, d := start(t, embeddedtest.Options{Keyless: "keyless"}, "keyless")
	d.shows("● not ready") // the gateway said so before the first message
	d.say("hello")
	d.shows("has no usable model")
	d.shows("│ New conversation (default)") // the message was kept, and the error stays under it
	g.Expect(d.view()).To(ContainSubstring("You\nhello\n\n✗ no_model: "))

	// A gateway that is not there: the message comes back to the input.
	c, err := client.New("http://127.0.0.1:1", client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	d = drive(t, New(Config{Client: c, Agent: "assistant", ChatID: "tui",
		Explain: func(err error) string {
			if errors.Is(err, client.ErrUnreachable) {
				return "gateway is down"
			}
			return err.Error()
		}}))
	d.shows("✗ gateway is down")
	g.Expect(d.view()).To(ContainSubstring("○ offline"))
	d.say("hello?")
	d.until("the send to fail", func(string) bool { return !d.m.(Model).busy() })
	g.Expect(d.m.(Model).input.Value()).To(Equal("hello?"))
	g.Expect(d.view()).NotTo(ContainSubstring("You\nhello?"))
}

func TestAgentPicker(t *testing.T) {
	g := NewWithT(t)
	env, d := start(t, embeddedtest.Options{Agents: []string{"alpha", "beta"}}, "")
	g.Expect(d.view()).To(ContainSubstring("pick an agent"))
	g.Expect(d.view()).To(ContainSubstring("› alpha"))
	d.key(tea.KeyDown)
	g.Expect(d.view()).To(ContainSubstring("› beta"))
	d.key(tea.KeyEnter)
	d.shows("PicoBot │ beta │")
	d.shows("● online")

	env.LLM.Script(fakellm.Turn{Text: "beta here"})
	d.say("who are you?")
	d.shows("beta\nbeta here")
}

func TestInputGrowsWithAltEnter(t *testing.T) {
	g := NewWithT(t)
	c, err := client.New("http://127.0.0.1:1", client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var m tea.Model = New(Config{Client: c, Agent: "a", ChatID: "c"})
	m, _ = m.Update(tea.WindowSizeMsg{Width: 60, Height: 20})
	for _, k := range []tea.KeyMsg{
		{Type: tea.KeyRunes, Runes: []rune("one")},
		{Type: tea.KeyEnter, Alt: true},
		{Type: tea.KeyRunes, Runes: []rune("two")},
		{Type: tea.KeyEnter, Alt: true},
		{Type: tea.KeyRunes, Runes: []rune("three")},
	} {
		m, _ = m.Update(k)
	}
	g.Expect(m.(Model).input.Value()).To(Equal("one\ntwo\nthree"))
	lines := strings.Split(screen(m), "\n")
	g.Expect(lines).To(HaveLen(20))
	g.Expect(lines[len(lines)-3:]).To(Equal([]string{"› one", "› two", "› three"}))
}

// Any window size, however small, draws without failing and fills the
// window exactly.
func TestTinyAndOddWindows(t *testing.T) {
	g := NewWithT(t)
	agents := []client.Agent{{Name: "alpha", Ready: true}, {Name: "beta", Message: "no model"}}
	for _, size := range [][2]int{{0, 0}, {1, 1}, {5, 3}, {12, 4}, {30, 8}, {200, 60}} {
		for _, picking := range []bool{false, true} {
			cfg := Config{Agents: agents, ChatID: "c"}
			if !picking {
				cfg.Agent = "alpha"
			}
			var m tea.Model = New(cfg)
			m, _ = m.Update(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
			mm := m.(Model)
			mm.log.add(entry{kind: entryUser, text: strings.Repeat("long words here ", 30)})
			mm.log.apply(client.Event{Kind: client.KindToolCall, CallID: "1", Name: "calculator", Arguments: "{}"})
			mm.errLine = "something went wrong"
			m, _ = mm.Update(tea.KeyMsg{Type: tea.KeyCtrlO})
			view := m.View()
			g.Expect(view).NotTo(BeEmpty())
			if !picking && size[1] >= 4 {
				g.Expect(strings.Split(view, "\n")).To(HaveLen(size[1]), "%v", size)
			}
		}
	}
}

func TestScrollingKeepsItsPlaceWhileTheReplyGrows(t *testing.T) {
	g := NewWithT(t)
	m := New(Config{Agent: "bot", ChatID: "c"})
	m.log = longTranscript(10)
	turn := &client.Turn{}
	m.turn = turn
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 60, Height: 14})
	delta := func(text string) {
		tm, _ = tm.Update(eventMsg{turn: turn, ev: client.Event{Kind: client.KindDelta, Text: text}})
	}
	body := func() string { // the transcript part of the screen
		lines := strings.Split(screen(tm), "\n")
		return strings.Join(lines[1:len(lines)-2], "\n")
	}
	delta("streaming")
	g.Expect(body()).To(HaveSuffix("bot\nstreaming▍"), "it follows the end")

	tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyPgUp})
	scrolled := body()
	g.Expect(scrolled).NotTo(ContainSubstring("streaming"))
	g.Expect(screen(tm)).To(ContainSubstring("more lines below: PgDn"))
	delta(" on and on\nand on\nfor several lines\n")
	g.Expect(body()).To(Equal(scrolled), "new lines do not move what is being read")

	tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyPgDown})
	tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyPgDown})
	tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyPgDown})
	g.Expect(screen(tm)).NotTo(ContainSubstring("more lines below"))
	delta("the end")
	g.Expect(body()).To(HaveSuffix("for several lines\nthe end▍"), "back at the end, it follows again")

	for range 100 {
		tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyPgUp})
	}
	g.Expect(body()).To(HavePrefix("You\nquestion 0:"), "PgUp stops at the top")
}

// TestChatNodes pairs a real node client (package device) with the gateway
// and lists and approves it with /nodes.
func TestChatNodes(t *testing.T) {
	g := NewWithT(t)
	env, d := start(t, embeddedtest.Options{Nodes: true}, "assistant")
	d.shows("● online")
	d.say("/nodes")
	d.shows("No paired devices.")

	states := make(chan string, 4)
	n, err := device.New(device.Config{Gateway: env.URL, ID: "tui-box", Name: "box", Capabilities: []string{"run"},
		Reconnect: -1, OnState: func(s node.State) { states <- s.State }})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node client: %v", err)
		}
	}()
	g.Eventually(states).WithTimeout(20 * time.Second).Should(Receive(Equal("pending")))

	d.say("/nodes")
	d.shows("tui-box  box  pending, online")
	d.say("/nodes approve tui-box")
	d.shows("Node tui-box (box) is approved.")
	g.Eventually(states).WithTimeout(20 * time.Second).Should(Receive(Equal("approved")))
	d.say("/nodes fly")
	d.shows("/nodes lists the paired devices")
}
