package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

// Crash campaign parameters: campaignTurns messages over campaignChats chats
// at once, while the server is killed (-9) or terminated (SIGTERM) at random
// points.
const (
	campaignTurns = 300
	campaignChats = 4
)

var turnRE = regexp.MustCompile(`^turn (\d+)$`)

// campaignModel answers "turn N" with one bash call that appends N to
// runs.log in the session's workspace (the counter that shows whether a
// finished call ran twice), then, once the call's result (or its
// interruption) is back, with "answer N". It decides from the request
// alone, as the server's restarts must not matter to it.
func campaignModel(r fakellm.Recorded) fakellm.Turn {
	n, lastRole := "", ""
	for _, m := range r.Messages {
		if m.Role == "user" && len(m.ToolResults) == 0 {
			if sm := turnRE.FindStringSubmatch(m.Content); sm != nil {
				n = sm[1]
			}
		}
		lastRole = m.Role
		if len(m.ToolResults) > 0 {
			lastRole = "tool"
		}
	}
	if n == "" {
		return fakellm.Turn{Text: "no turn"}
	}
	if lastRole == "user" {
		return fakellm.Turn{Delay: time.Duration(rand.IntN(40)) * time.Millisecond,
			ToolCalls: []fakellm.Call{call("bash", map[string]any{"command": "echo " + n + " >> runs.log; sleep 0.0" + fmt.Sprint(rand.IntN(10))})}}
	}
	return fakellm.Turn{Text: "answer " + n, Delay: time.Duration(rand.IntN(40)) * time.Millisecond}
}

// campaignServer is `picobot serve` on a fixed address, restarted after
// each kill.
type campaignServer struct {
	tb   testing.TB
	dir  string
	addr string
	env  string
	mu   sync.Mutex
	p    *serveProc
}

func (c *campaignServer) start() {
	cmd := []string{"--addr", c.addr, "--shutdown-grace", "2s"}
	p := serveArgs(c.tb, c.dir, cmd, c.env)
	c.mu.Lock()
	c.p = p
	c.mu.Unlock()
}

// send posts one message with its id until it gets an answer, resending it
// (the same id) across the server's restarts; it returns the answer and how
// many sendings it took.
func send(ctx context.Context, url, chat, id, text string) (string, int, error) {
	body, _ := json.Marshal(map[string]string{"id": id, "agent": "assistant", "chat_id": chat, "text": text})
	for try := 1; ; try++ {
		if ctx.Err() != nil {
			return "", try, fmt.Errorf("message %s never answered: %w", id, ctx.Err())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/send", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the server is down: resend
			continue
		}
		var out struct {
			Text  string `json:"text"`
			Error *struct {
				Code, Message string
			} `json:"error"`
		}
		derr := json.NewDecoder(res.Body).Decode(&out)
		_ = res.Body.Close()
		switch {
		case derr != nil:
			time.Sleep(50 * time.Millisecond) // cut off mid-answer: resend
		case res.StatusCode == http.StatusOK && out.Text != "":
			return out.Text, try, nil
		case res.StatusCode == http.StatusServiceUnavailable:
			time.Sleep(50 * time.Millisecond) // restarting: resend with the same id
		default:
			return "", try, fmt.Errorf("message %s: HTTP %d %+v", id, res.StatusCode, out.Error)
		}
	}
}

// TestCrashCampaign drives campaignTurns messages with tool calls through
// `picobot serve` while it is killed with -9 or terminated at random
// points, every client resending its message with the same id until
// answered. Every message gets exactly one non-empty answer (the right
// one), no finished tool call runs twice (the counter its bash call
// appends to), nothing is stored twice, and every SIGTERM exits 0.
func TestCrashCampaign(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	defer s.Close()
	s.Respond(campaignModel)
	dir := t.TempDir()
	writeAgent(t, dir, s.URL(), codingTools)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	_ = ln.Close()
	srv := &campaignServer{tb: t, dir: dir, addr: addr, env: "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"}
	srv.start()
	url := "http://" + addr

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var next atomic.Int32
	answers := make([]string, campaignTurns)
	var sendings atomic.Int32
	errs := make(chan error, campaignChats)
	var clients sync.WaitGroup
	for c := range campaignChats {
		clients.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= campaignTurns {
					return
				}
				text, tries, err := send(ctx, url, fmt.Sprintf("chat-%d", c), fmt.Sprintf("t-%d", n), fmt.Sprintf("turn %d", n))
				sendings.Add(int32(tries))
				if err != nil {
					errs <- err
					return
				}
				answers[n] = text
			}
		})
	}
	kills, terms := 0, 0
	finished := make(chan struct{})
	go func() { clients.Wait(); close(finished) }()
	for done := false; !done; {
		select {
		case <-finished:
			done = true
			continue
		case <-time.After(time.Duration(300+rand.IntN(1200)) * time.Millisecond):
		}
		srv.mu.Lock()
		p := srv.p
		srv.mu.Unlock()
		if rand.IntN(4) == 0 {
			terms++
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.done
			g.Expect(p.cmd.ProcessState.ExitCode()).To(Equal(0), "SIGTERM exits 0:\n%s", p.log)
		} else {
			kills++
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		srv.start()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	g.Expect(t.Failed()).To(BeFalse())
	srv.mu.Lock()
	srv.p.stop()
	g.Expect(srv.p.cmd.ProcessState.ExitCode()).To(Equal(0))
	srv.mu.Unlock()

	for n, a := range answers {
		g.Expect(a).To(Equal(fmt.Sprintf("answer %d", n)), "message t-%d", n)
	}
	runs := countRuns(t, filepath.Join(dir, ".picobot", "workspaces"))
	stored := checkStored(t, filepath.Join(dir, ".picobot", "picobot.db"))
	ran := 0
	for n := range campaignTurns {
		g.Expect(runs[fmt.Sprint(n)]).To(BeNumerically("<=", 1), "the bash call of turn %d ran twice", n)
		ran += runs[fmt.Sprint(n)]
	}
	t.Logf("crash campaign: %d turns over %d chats, %d kill -9, %d SIGTERM (exit 0), %d sendings (%d resent), "+
		"%d tool calls ran once and never twice, %d recorded as interrupted, %d messages stored once each",
		campaignTurns, campaignChats, kills, terms, sendings.Load(), int(sendings.Load())-campaignTurns,
		ran, stored.interrupted, stored.messages)
	g.Expect(kills+terms).To(BeNumerically(">=", 5), "the campaign must crash the server more than a few times")
}

// countRuns reads every runs.log of the workspaces: turn number -> runs of
// its bash call.
func countRuns(tb testing.TB, root string) map[string]int {
	runs := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "runs.log" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
			runs[line]++
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return runs
}

type storedCounts struct{ messages, interrupted int }

// checkStored reads the stopped server's store: every user message once,
// followed by exactly one answer, each turn's messages with their own ids.
func checkStored(tb testing.TB, db string) storedCounts {
	g := NewWithT(tb)
	ctx := store.WithTenant(context.Background(), "default")
	st, err := sqlite.Open(ctx, db)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	sessions, err := st.ListSessions(ctx, store.SessionFilter{Limit: 100})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sessions).To(HaveLen(campaignChats))
	var c storedCounts
	users := map[string]int{}
	for _, s := range sessions {
		msgs, err := st.LoadMessages(ctx, s.ID, store.LoadOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		ids := map[string]bool{}
		answersOf := map[string]int{}
		user := ""
		for _, m := range msgs {
			g.Expect(ids[m.ID]).To(BeFalse(), "message %s stored twice", m.ID)
			ids[m.ID] = true
			c.messages++
			switch {
			case m.Role == llm.RoleUser:
				user = m.Content
				users[m.Content]++
			case m.Role == llm.RoleAssistant && len(m.ToolCalls) == 0:
				answersOf[user]++
				g.Expect(m.Content).To(Equal(strings.Replace(user, "turn", "answer", 1)))
			case m.Role == llm.RoleTool && m.Content == session.InterruptedResult:
				c.interrupted++
			}
		}
		for u, n := range answersOf {
			g.Expect(n).To(Equal(1), "%q answered %d times", u, n)
		}
	}
	g.Expect(users).To(HaveLen(campaignTurns))
	for u, n := range users {
		g.Expect(n).To(Equal(1), "%q stored %d times", u, n)
	}
	if c.messages == 0 {
		tb.Fatal(errors.New("nothing stored"))
	}
	return c
}

// BenchmarkResumeAfterRestart measures the time from starting `picobot
// serve` again after a kill -9 mid-tool-call to the resumed turn's answer
// (process start, the resume of the turn at start, one model call), as its
// client sees it resending the message.
func BenchmarkResumeAfterRestart(b *testing.B) {
	s := fakellm.New()
	defer s.Close()
	s.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if last := r.Messages[len(r.Messages)-1]; len(last.ToolResults) == 0 {
			return fakellm.Turn{ToolCalls: []fakellm.Call{call("bash", map[string]any{"command": "touch started; sleep 60"})}}
		}
		return fakellm.Turn{Text: "resumed"}
	})
	dir := b.TempDir()
	writeAgent(b, dir, s.URL(), codingTools)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	srv := &campaignServer{tb: b, dir: dir, addr: addr, env: "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"}
	var total time.Duration
	var samples []time.Duration
	for i := 0; b.Loop(); i++ {
		srv.start()
		id := fmt.Sprintf("r-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		go func() { _, _, _ = send(ctx, "http://"+addr, "bench", id, "turn 1") }()
		for {
			matches, _ := filepath.Glob(filepath.Join(dir, ".picobot", "workspaces", "*", "*", "*", "started"))
			if len(matches) > 0 {
				for _, m := range matches {
					_ = os.Remove(m)
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		_ = srv.p.cmd.Process.Kill()
		<-srv.p.done
		start := time.Now()
		srv.start()
		text, _, err := send(context.Background(), "http://"+addr, "bench", id, "turn 1")
		d := time.Since(start)
		if err != nil || text != "resumed" {
			b.Fatalf("resumed turn: %q %v", text, err)
		}
		total += d
		samples = append(samples, d)
		srv.p.stop()
	}
	slices.Sort(samples)
	b.ReportMetric(float64(total.Milliseconds())/float64(len(samples)), "restart-to-answer-ms")
	b.ReportMetric(float64(samples[len(samples)/2].Milliseconds()), "p50-ms")
}
