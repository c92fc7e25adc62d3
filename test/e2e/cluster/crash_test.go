package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
)

// crashManifest is a tenant whose Agent's tools may append to one host
// folder (the pod runner runs pods on this machine): the counter of the
// campaign's tool calls, outside every pod's workspace.
const crashManifest = tenantBase + `
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: worker
  namespace: %[1]s
spec:
  model:
    provider: openai
    model: fake-model
    baseURL: %[3]s
    apiKeySecretRef: {name: model-key, key: apiKey}
  tools:
    profile: coding
    fs:
      allowedPaths:
      - {path: %[4]s, access: ReadWrite}
  runtime:
    idleTimeout: 10m
    warmPool: 1
`

var clusterTurnRE = regexp.MustCompile(`^job (\d+)$`)

// TestClusterCrashCampaign runs 300 turns with a tool call each over six
// chats while, at random points, session pods are killed with -9 mid-turn or
// deleted (SIGTERM: they drain), the gateway is killed with -9 and started
// again, Redis is killed with -9 and restarted, and PostgreSQL is killed
// with -9 or shut down, and started again;
// clients resend their message with the same id when their request fails.
// A chat's next pod claims the unacknowledged message and resumes the turn
// from its steps stored in PostgreSQL: no finished call runs again (the
// counter the calls append to), the call that was running is recorded as
// interrupted, and every message gets exactly one answer, stored once.
func TestClusterCrashCampaign(t *testing.T) {
	needStack(t)
	if st.redisServer == nil || st.pgServer == nil {
		t.Skip("SKIPPED LOUDLY: PICOBOT_TEST_REDIS_URL or PICOBOT_TEST_POSTGRES_URL names a shared server, which this test cannot crash")
	}
	t.Cleanup(func() {
		if err := st.redisServer.Restart(); err != nil {
			t.Errorf("failed to bring Redis back: %v", err)
		}
		if err := st.pgServer.Resume(); err != nil {
			t.Errorf("failed to bring PostgreSQL back: %v", err)
		}
	})
	g := NewWithT(t)
	const turns, chats = 300, 6
	ns, key := "tenant-crash", "tenant-crash-key"
	// The counter folder is the sandbox container's to write: its programs
	// run as their own user.
	counter, err := os.MkdirTemp("", "picobot-crash-counter-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.Chmod(counter, 0o777)).To(Succeed())
	t.Cleanup(func() { _ = os.RemoveAll(counter) })
	runsLog := filepath.Join(counter, "runs.log")
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		n, last := "", ""
		for _, m := range r.Messages {
			if sm := clusterTurnRE.FindStringSubmatch(m.Content); m.Role == "user" && sm != nil {
				n = sm[1]
			}
			last = m.Role
		}
		switch {
		case n == "":
			return fakellm.Turn{Text: "no job"}
		case last == "user":
			cmd := fmt.Sprintf("echo %s >> %s; sleep 0.%d", n, runsLog, 2+rand.IntN(6))
			b, _ := json.Marshal(map[string]string{"command": cmd})
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "bash", Args: string(b)}}}
		default:
			return fakellm.Turn{Text: "done " + n}
		}
	})
	st.apply(t, fmt.Sprintf(crashManifest, ns, key, st.llm.URL(), counter))
	st.waitReady(t, ns, "worker")
	// A gateway of the campaign's own, on a fixed address, so that it can
	// be killed and started again where the clients find it.
	gw := startGateway(t)
	c := gatewaytest.Client{URL: gw.url, Key: key}

	answers, lastErr := make([]string, turns), make([]string, turns)
	var next, resent atomic.Int32
	var clients sync.WaitGroup
	for ch := range chats {
		clients.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= turns {
					return
				}
				body := map[string]string{"id": fmt.Sprintf("job-%d", n), "agent": "worker", "chat_id": fmt.Sprintf("c%d", ch), "text": fmt.Sprintf("job %d", n)}
				// A client resends the same id until it has the answer. It
				// gives up after 3 minutes (a message never answered), not
				// after a number of tries: while the gateway, Redis or
				// PostgreSQL is down, tries fail in milliseconds.
				for giveUp := time.Now().Add(3 * time.Minute); time.Now().Before(giveUp); {
					res, err := c.Request(http.MethodPost, "/api/v1/send", body, nil)
					var out struct{ Text string }
					if err == nil && res.Status == http.StatusOK && json.Unmarshal(res.Body, &out) == nil && out.Text != "" {
						answers[n] = out.Text
						break
					}
					if err != nil {
						lastErr[n] = err.Error()
					} else {
						lastErr[n] = fmt.Sprintf("%d %s", res.Status, res.Body)
					}
					resent.Add(1) // the same id again
					time.Sleep(200 * time.Millisecond)
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { clients.Wait(); close(finished) }()
	kills, terms, redisKills, pgKills, pgHalts, gwKills := 0, 0, 0, 0, 0, 0
	for done := false; !done; {
		select {
		case <-finished:
			done = true
			continue
		case <-time.After(time.Duration(300+rand.IntN(1200)) * time.Millisecond):
		}
		switch rand.IntN(10) {
		case 0: // Redis crashes and comes back with what it had acknowledged
			g.Expect(st.redisServer.Kill()).To(Succeed())
			time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
			g.Expect(st.redisServer.Restart()).To(Succeed())
			redisKills++
		case 1: // PostgreSQL crashes (kill -9 of every process) or goes
			// down (fast shutdown), and comes back. The throwaway server
			// runs with synchronous_commit=off; the store's sessions commit
			// durably all the same (postgres.OpenConfig), so a crash loses
			// no commit it acknowledged.
			if rand.IntN(2) == 0 {
				g.Expect(st.pgServer.Crash()).To(Succeed())
				pgKills++
			} else {
				g.Expect(st.pgServer.Halt()).To(Succeed())
				pgHalts++
			}
			time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
			g.Expect(st.pgServer.Resume()).To(Succeed())
		case 2: // the gateway crashes under its clients' requests
			gw.kill()
			gw.start(t)
			gwKills++
		case 3: // a session pod is deleted: SIGTERM, it drains
			if victim := busyPodOf(t, ns, "worker"); victim != nil {
				g.Expect(st.cs.CoreV1().Pods(ns).Delete(context.Background(), victim.Name, metav1.DeleteOptions{})).To(Succeed())
				terms++
			}
		default:
			if victim := busyPodOf(t, ns, "worker"); victim != nil && st.runner.Kill(victim.UID) {
				kills++
			}
		}
	}

	for n, a := range answers {
		g.Expect(a).To(Equal(fmt.Sprintf("done %d", n)), "job %d; the last failed try: %s", n, lastErr[n])
	}
	b, err := os.ReadFile(runsLog)
	g.Expect(err).NotTo(HaveOccurred())
	runs := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		runs[line]++
	}
	for n := range turns {
		g.Expect(runs[fmt.Sprint(n)]).To(BeNumerically("<=", 1), "the call of job %d ran twice", n)
	}
	interrupted, stored := 0, 0
	for ch := range chats {
		path := fmt.Sprintf("/api/v1/sessions/web:worker%%2Fc%d:default/messages?last=500", ch)
		status, body := c.Do(t, "GET", path, nil)
		g.Expect(status).To(Equal(200), "%v", body)
		finals := map[string]int{}
		users := map[string]int{}
		user := ""
		for _, raw := range body["messages"].([]any) {
			m := raw.(map[string]any)
			stored++
			content := fmt.Sprint(m["content"])
			switch {
			case m["role"] == "user":
				user = content
				users[user]++
			case m["role"] == "assistant" && m["tool_calls"] == nil:
				finals[user]++
				g.Expect(content).To(Equal(strings.Replace(user, "job", "done", 1)))
			case m["role"] == "tool" && content == session.InterruptedResult:
				interrupted++
			}
		}
		for u, k := range users {
			g.Expect(k).To(Equal(1), "%q stored %d times", u, k)
			g.Expect(finals[u]).To(Equal(1), "%q answered %d times", u, finals[u])
		}
	}
	t.Logf("cluster crash campaign: %d turns over %d chats; %d session pods killed with -9 mid-turn, %d deleted (SIGTERM), "+
		"%d gateway kill -9, %d Redis kill -9, %d PostgreSQL kill -9, %d PostgreSQL restarts; %d resendings, %d calls ran (none twice), "+
		"%d recorded as interrupted, %d messages stored once each",
		turns, chats, kills, terms, gwKills, redisKills, pgKills, pgHalts, resent.Load(), len(runs), interrupted, stored)
	g.Expect(kills).To(BeNumerically(">=", 3), "the campaign must kill session pods")
}

// campaignGateway is a `picobot gateway` process on a fixed address.
type campaignGateway struct {
	addr, url string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startGateway(t *testing.T) *campaignGateway {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	gw := &campaignGateway{addr: addr, url: "http://" + addr}
	gw.start(t)
	t.Cleanup(gw.kill)
	return gw
}

// start runs the gateway and waits until it answers, starting it again
// when it exits first (as a kubelet would: a gateway that cannot reach a
// store that is still recovering exits).
func (gw *campaignGateway) start(t *testing.T) {
	for range 10 {
		if gw.try(t) {
			return
		}
	}
	t.Fatalf("the campaign's gateway did not start:\n%s", tail(filepath.Join(st.dir, "campaign-gateway.log"), 30))
}

// try starts the gateway once; false when it exited before answering.
func (gw *campaignGateway) try(t *testing.T) bool {
	logf, err := os.OpenFile(filepath.Join(st.dir, "campaign-gateway.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// No blob grant service: the stack's gateway serves the session pods.
	gw.cmd = exec.Command(st.picobot, "gateway", "--addr="+gw.addr, "--blob-addr=", "--reply-timeout=2m", "--namespace="+systemNamespace)
	gw.cmd.Env = append(append(os.Environ(), st.conn...), "KUBECONFIG="+st.env.KubeconfigPath)
	gw.cmd.Stdout, gw.cmd.Stderr = logf, logf
	if err := gw.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gw.done = make(chan struct{})
	go func() { _ = gw.cmd.Wait(); _ = logf.Close(); close(gw.done) }()
	for range 600 {
		if res, err := http.Get(gw.url + "/api/v1/health"); err == nil {
			_ = res.Body.Close()
			return true
		}
		select {
		case <-gw.done:
			time.Sleep(time.Second) // crashed at start: back off, start again
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("the campaign's gateway did not answer in 30 s:\n%s", tail(filepath.Join(st.dir, "campaign-gateway.log"), 30))
	return false
}

// kill ends the gateway with SIGKILL.
func (gw *campaignGateway) kill() {
	_ = gw.cmd.Process.Kill()
	<-gw.done
}

// busyPodOf returns a running session pod of the agent that serves a chat,
// or nil.
func busyPodOf(tb testing.TB, ns, agentName string) *corev1.Pod {
	var busy []corev1.Pod
	for _, p := range st.pods(tb, ns, agentName) {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		for ch := range 8 {
			if st.busyPod(ns, agentName, fmt.Sprintf("%s/c%d", agentName, ch)) == p.Name {
				busy = append(busy, p)
			}
		}
	}
	if len(busy) == 0 {
		return nil
	}
	return &busy[rand.IntN(len(busy))]
}
