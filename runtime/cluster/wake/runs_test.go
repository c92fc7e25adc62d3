package wake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/test/services"
)

// redisURL is a throwaway Redis server for the package (as runtime/cluster's
// tests start it); empty, with skipReason, when none could be started.
var redisURL, skipReason string

func TestMain(m *testing.M) {
	url, stop, err := services.Redis()
	if err != nil {
		reason, fatal := services.Unavailable("Redis", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipReason = reason
	} else {
		redisURL = url
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	// Every subscription a Runner or RunNotices opened must be closed.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// redisBus connects to the test server; each test uses a tenant of its own,
// so streams do not mix between tests.
func redisBus(t *testing.T) (*redisbus.Bus, string) {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED LOUDLY: " + skipReason)
	}
	b, err := redisbus.Open(redisURL, redisbus.Options{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = b.Close() })
	return b, fmt.Sprintf("t%d", time.Now().UnixNano())
}

// nextMessage waits for the next message of stream for group.
func nextMessage(ctx context.Context, b bus.Bus, stream, group string) (bus.Message, error) {
	for {
		msgs, err := b.Fetch(ctx, stream, group, "test", bus.FetchOptions{Count: 1, Block: time.Second})
		if err != nil {
			return bus.Message{}, err
		}
		if len(msgs) > 0 {
			return msgs[0], b.Ack(ctx, stream, group, msgs[0].Seq)
		}
	}
}

// pod plays a session pod of tenant's agent helper: it claims the next wake
// and answers its run with answer (a RunResult, or raw text when a string).
func pod(t *testing.T, b *redisbus.Bus, tenant string, answer any) <-chan wake.Wake {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	got := make(chan wake.Wake, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(got)
		m, err := nextMessage(ctx, b, wake.Stream(tenant, "helper"), wake.GroupPods)
		if err != nil {
			t.Errorf("the pod got no wake: %v", err)
			return
		}
		var w wake.Wake
		if err := json.Unmarshal(m.Payload, &w); err != nil || w.Run == nil {
			t.Errorf("the wake %s carries no run: %v", m.Payload, err)
			return
		}
		got <- w
		payload, ok := answer.(string)
		if !ok {
			raw, _ := json.Marshal(answer)
			payload = string(raw)
		}
		if err := b.Client().Publish(ctx, wake.RunResultChannel(w.Tenant, w.Run.RunID), payload).Err(); err != nil {
			t.Errorf("the pod could not publish the result: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return got
}

func runRequest(tenant, runID string) scheduler.RunRequest {
	return scheduler.RunRequest{Tenant: tenant, Job: tenant + "/disk", JobName: "Disk check", RunID: runID,
		ScheduledTime: time.Date(2030, 3, 4, 9, 0, 0, 0, time.UTC), Agent: "helper", Prompt: "Check the disk."}
}

func TestRunnerWakesAPodWithTheRun(t *testing.T) {
	g := NewWithT(t)
	b, tenant := redisBus(t)
	want := scheduler.RunResult{Outcome: store.OutcomeAlert, Message: "Disk at 95%", SessionID: "cron:run-r1:d1"}
	woken := pod(t, b, tenant, wake.RunResult{Result: want})

	r := wake.Runner{Bus: b, Redis: b.Client()}
	res, err := r.Run(context.Background(), runRequest(tenant, "r1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(want))

	w := <-woken
	g.Expect(w.Tenant).To(Equal(tenant))
	g.Expect(w.Agent).To(Equal("helper"))
	g.Expect(w.Channel).To(Equal(wake.RunChannel))
	g.Expect(w.ChatKey).To(Equal("run-r1"), "every run has a chat, so a fresh session, of its own")
	g.Expect(*w.Run).To(Equal(wake.Run{RunID: "r1", Job: tenant + "/disk", JobName: "Disk check",
		ScheduledTime: time.Date(2030, 3, 4, 9, 0, 0, 0, time.UTC), Prompt: "Check the disk."}))
	// The operator was told too, to size the agent's pool.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		// Notices is shared by every tenant: skip other tests' wakes.
		m, err := nextMessage(ctx, b, wake.Notices, "test-"+tenant)
		g.Expect(err).NotTo(HaveOccurred())
		var n wake.Wake
		g.Expect(json.Unmarshal(m.Payload, &n)).To(Succeed())
		if n.Tenant == tenant {
			g.Expect(n.Run).To(Equal(w.Run))
			break
		}
	}
}

func TestRunnerFailures(t *testing.T) {
	partial := scheduler.RunResult{Outcome: store.OutcomeFailed, Message: "model unreachable", SessionID: "cron:run-r2:d1"}
	cases := []struct {
		name   string
		answer any
		result scheduler.RunResult
		err    string
	}{
		{name: "the pod's error, with what it has", answer: wake.RunResult{Result: partial, Error: "agent helper has no usable model"},
			result: partial, err: "agent helper has no usable model"},
		{name: "a malformed result", answer: "{not json", err: "malformed run result: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			b, tenant := redisBus(t)
			pod(t, b, tenant, tc.answer)
			res, err := wake.Runner{Bus: b, Redis: b.Client()}.Run(context.Background(), runRequest(tenant, "r2"))
			g.Expect(err).To(MatchError(HavePrefix(tc.err)))
			g.Expect(res).To(Equal(tc.result))
		})
	}
}

func TestRunnerGivesUp(t *testing.T) {
	t.Run("after its timeout", func(t *testing.T) {
		g := NewWithT(t)
		b, tenant := redisBus(t)
		start := time.Now()
		_, err := wake.Runner{Bus: b, Redis: b.Client(), Timeout: 300 * time.Millisecond}.Run(context.Background(), runRequest(tenant, "r3"))
		g.Expect(err).To(MatchError("the session pod did not finish the run within 300ms"))
		g.Expect(time.Since(start)).To(BeNumerically(">=", 300*time.Millisecond))
		// The wake stays queued for a pod that comes later.
		n, err := b.Len(context.Background(), wake.Stream(tenant, "helper"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeEquivalentTo(1))
	})
	t.Run("when its context ends", func(t *testing.T) {
		g := NewWithT(t)
		b, tenant := redisBus(t)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := wake.Runner{Bus: b, Redis: b.Client()}.Run(ctx, runRequest(tenant, "r4"))
		g.Expect(err).To(MatchError(context.Canceled))
	})
	t.Run("without Redis", func(t *testing.T) {
		g := NewWithT(t)
		b, tenant := redisBus(t)
		closed, err := redisbus.Open(redisURL, redisbus.Options{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(closed.Close()).To(Succeed())
		_, err = wake.Runner{Bus: b, Redis: closed.Client()}.Run(context.Background(), runRequest(tenant, "r5"))
		g.Expect(err).To(MatchError(HavePrefix("failed to subscribe to the run's result: ")))
		n, err := b.Len(context.Background(), wake.Stream(tenant, "helper"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeZero(), "no wake without a way to hear the result")
	})
}

// gateway plays the gateway's dispatcher: it takes tenant's next outbound
// request and answers it with answer (an OutboundResult, or raw text).
func gateway(t *testing.T, b *redisbus.Bus, tenant string, answer any) <-chan wake.OutboundRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	got := make(chan wake.OutboundRequest, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(got)
		m, err := nextMessage(ctx, b, wake.OutboundStream(tenant), "gateway")
		if err != nil {
			t.Errorf("the gateway got no request: %v", err)
			return
		}
		var req wake.OutboundRequest
		if err := json.Unmarshal(m.Payload, &req); err != nil {
			t.Errorf("malformed request %s: %v", m.Payload, err)
			return
		}
		got <- req
		payload, ok := answer.(string)
		if !ok {
			raw, _ := json.Marshal(answer)
			payload = string(raw)
		}
		if err := b.Client().Publish(ctx, wake.ResultChannel(req.Tenant, req.ID), payload).Err(); err != nil {
			t.Errorf("the gateway could not publish the result: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return got
}

func TestRunNoticesDeliverThroughTheGateway(t *testing.T) {
	cases := []struct {
		name   string
		answer any
		err    string // "" for a delivered notice
	}{
		{name: "delivered", answer: wake.OutboundResult{Result: json.RawMessage(`{"delivered":1}`)}},
		{name: "refused", answer: wake.OutboundResult{Error: "telegram: chat 42 not found"}, err: "telegram: chat 42 not found"},
		{name: "malformed", answer: "[", err: "malformed delivery result: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			b, tenant := redisBus(t)
			var asked []string
			n := wake.RunNotices{Bus: b, Redis: b.Client(), Owner: func(_ context.Context, tenant, channel string) string {
				asked = append(asked, tenant+"/"+channel)
				return "ops-bot"
			}}
			got := gateway(t, b, tenant, tc.answer)
			err := n.Deliver(context.Background(), scheduler.Notice{ID: "notice-1", Tenant: tenant, Job: tenant + "/disk", RunID: "r1",
				Channel: "telegram", ChatID: "42", Outcome: store.OutcomeAlert, Text: "Disk at 95%"})
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(HavePrefix(tc.err)))
			}
			req := <-got
			g.Expect(asked).To(Equal([]string{tenant + "/telegram"}))
			g.Expect(req.ID).NotTo(BeEmpty())
			g.Expect(req.Wait).To(BeTrue(), "the notice waits for the gateway's result")
			g.Expect(req.Message).To(Equal(wake.OutboundMessage{Agent: "ops-bot", Target: "telegram:42", Text: "Disk at 95%", Origin: "notice-1"}))
		})
	}
}

func TestRunNoticesGiveUp(t *testing.T) {
	t.Run("when the context ends", func(t *testing.T) {
		g := NewWithT(t)
		b, tenant := redisBus(t)
		n := wake.RunNotices{Bus: b, Redis: b.Client(), Owner: func(context.Context, string, string) string { return "ops-bot" }}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := n.Deliver(ctx, scheduler.Notice{ID: "n2", Tenant: tenant, Channel: "web", ChatID: "alice", Text: "x"})
		g.Expect(errors.Is(err, context.DeadlineExceeded)).To(BeTrue(), "%v", err)
	})
	t.Run("without Redis", func(t *testing.T) {
		g := NewWithT(t)
		b, tenant := redisBus(t)
		closed, err := redisbus.Open(redisURL, redisbus.Options{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(closed.Close()).To(Succeed())
		n := wake.RunNotices{Bus: b, Redis: closed.Client(), Owner: func(context.Context, string, string) string { return "ops-bot" }}
		err = n.Deliver(context.Background(), scheduler.Notice{ID: "n3", Tenant: tenant, Channel: "web", ChatID: "alice", Text: "x"})
		g.Expect(err).To(MatchError(HavePrefix("failed to subscribe to the delivery result: ")))
	})
}
