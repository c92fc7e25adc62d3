package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/godbus/dbus/v5"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/nodeproc"
	"github.com/picobot/picobot/test/services"
)

// nodesModel calls the nodes tool with the JSON after "NODES " in the
// user's message, and answers a tool result with "RESULT:" (or "ERROR:"
// for an error result, which the tool starts with "error:") and the
// result's content, so the test reads what
// the model was given.
func nodesModel(r fakellm.Recorded) fakellm.Turn {
	last := r.Messages[len(r.Messages)-1]
	if len(last.ToolResults) > 0 {
		tr := last.ToolResults[len(last.ToolResults)-1]
		if tr.IsError || strings.HasPrefix(tr.Content, "error:") { // the OpenAI protocol carries no error flag
			return fakellm.Turn{Text: "ERROR:" + tr.Content}
		}
		return fakellm.Turn{Text: "RESULT:" + tr.Content}
	}
	if args, ok := strings.CutPrefix(last.Content, "NODES "); ok {
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "nodes", Args: args}}}
	}
	return fakellm.Turn{Text: "ok"}
}

// attachment is a file a tool result showed.
type attachment struct {
	ID        string `json:"id"`
	MediaType string `json:"media_type"`
	URL       string `json:"url"`
}

// turnResult is what a turn showed: its final text and the attachments of
// its tool results.
type turnResult struct {
	Final       string
	Attachments []attachment
}

// askAgent sends text to the agent over the WebSocket with key and waits for
// the turn to end. The key's rate limit (10/s, bursts of 20) is shared with
// the nodes' frames and the test's REST calls: a refused dial or send is
// retried (with the same message id) after the second it asks for.
func askAgent(ctx context.Context, base, key, id, text string) (turnResult, error) {
	for {
		res, err := askOnce(ctx, base, key, id, text)
		if err == nil || (!strings.Contains(err.Error(), "429") && !strings.Contains(err.Error(), "rate limit")) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(time.Second):
		}
	}
}

func askOnce(ctx context.Context, base, key, id, text string) (turnResult, error) {
	var out turnResult
	c, res, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/api/v1/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
	if err != nil {
		return out, err
	}
	defer func() { _ = c.CloseNow() }()
	c.SetReadLimit(32 << 20)
	b, _ := json.Marshal(map[string]any{"v": 1, "type": "send", "id": id, "agent": "assistant", "chat_id": "nodes", "text": text})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		return out, err
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return out, err
		}
		var f struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Event   struct {
				Kind        string       `json:"kind"`
				Text        string       `json:"text"`
				Attachments []attachment `json:"attachments"`
			} `json:"event"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return out, err
		}
		switch {
		case f.Type == "error":
			return out, fmt.Errorf("error frame: %s", f.Message)
		case f.Type == "event" && f.Event.Kind == "tool_result":
			out.Attachments = append(out.Attachments, f.Event.Attachments...)
		case f.Type == "event" && f.Event.Kind == "final":
			out.Final = f.Event.Text
		case f.Type == "done":
			return out, nil
		}
	}
}

// notifications is a notification server the test owns on its session
// bus: it implements org.freedesktop.Notifications.Notify and records the
// summary and body of each notification.
type notifications struct{ got chan [2]string }

// Notify implements the D-Bus method.
func (s *notifications) Notify(_ string, _ uint32, _, summary, body string, _ []string, _ map[string]dbus.Variant, _ int32) (uint32, *dbus.Error) {
	s.got <- [2]string{summary, body}
	return 7, nil
}

func serveNotifications(tb testing.TB, addr string) *notifications {
	tb.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	s := &notifications{got: make(chan [2]string, 4)}
	if err := conn.Export(s, "/org/freedesktop/Notifications", "org.freedesktop.Notifications"); err != nil {
		tb.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.Notifications", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		tb.Fatalf("failed to own org.freedesktop.Notifications: %v (reply %d)", err, reply)
	}
	return s
}

// freeAddr is a loopback address with a port free now, so a restarted
// server listens where its node reconnects.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestNodesPairedThroughServe pairs real `picobot node` processes with a
// real `picobot serve`: a new node waits as pending (the agent sees it and
// cannot use it), the CLI approves it, the agent's run waits for the node's
// own user (the test answers the prompt on the node's stdin: yes, then no),
// an allowlisted command runs without asking, notify reaches a notification
// server on a real D-Bus session bus, screen_record records an Xvfb display
// as mp4, invalid arguments come back to the model as tool errors, the
// approval survives a restart of the gateway, the agent rejects a second
// node, and a revoked node is disconnected and its process ends. Every
// call is in the audit log.
func TestNodesPairedThroughServe(t *testing.T) {
	g := NewWithT(t)
	// The test's REST polls share the key's rate limit (10/s) with the
	// nodes' own connections.
	g.SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	bus := services.StartSessionBus(t)
	display := services.StartXvfb(t, 320, 240)
	notes := serveNotifications(t, bus)

	llm := fakellm.New()
	defer llm.Close()
	llm.Respond(nodesModel)
	dir := t.TempDir()
	writeAgent(t, dir, llm.URL(), "  tools:\n    allow: [nodes]\n")
	const key = "sk-nodes-0123456789"
	addr := freeAddr(t)
	secret := "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test"
	p := serveArgs(t, dir, []string{"--addr", addr, "--api-key", key}, secret)
	c, err := client.New(p.url, client.Options{APIKey: key})
	g.Expect(err).NotTo(HaveOccurred())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	msg := 0
	agent := func(args string) turnResult {
		msg++
		res, err := askAgent(ctx, p.url, key, fmt.Sprintf("m%d", msg), "NODES "+args)
		g.Expect(err).NotTo(HaveOccurred(), args)
		return res
	}

	nodeDir := t.TempDir()
	nd := nodeproc.Start(t, picobotBin, p.url, key, nodeDir, "testbox", "DBUS_SESSION_BUS_ADDRESS="+bus, "DISPLAY="+display)
	id := nd.ID(g)
	g.Eventually(func() ([]client.Node, error) { return c.Nodes(ctx, "pending") }).WithTimeout(30*time.Second).
		Should(ContainElement(And(HaveField("ID", id), HaveField("Connected", true))), nd.Stderr)

	// Pending: the agent sees the request and may not use the node.
	g.Expect(agent(`{"action":"pending"}`).Final).To(And(HavePrefix("RESULT:"), ContainSubstring(id), ContainSubstring("testbox")))
	g.Expect(agent(`{"action":"run","node":"` + id + `","command":["echo","hi"]}`).Final).To(
		And(HavePrefix("ERROR:"), ContainSubstring("no approved node")))

	// The CLI approves it; the node hears it.
	out, err := exec.Command(picobotBin, "nodes", "--url", p.url, "--api-key", key, "approve", id).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("is approved"))
	g.Eventually(nd.Stderr).WithTimeout(10 * time.Second).Should(ContainSubstring("state=approved"))
	g.Expect(agent(`{"action":"describe","node":"testbox"}`).Final).To(And(ContainSubstring(`"run"`), ContainSubstring(`"notify"`),
		ContainSubstring(`"screen_record"`), ContainSubstring(`"connected": true`)))

	// run: the node's user is asked; the test answers on its stdin.
	answer := func(answerWith string, args string) turnResult {
		prompts := strings.Count(nd.Stdout(), "Allow? [y/N]")
		msg++
		id := fmt.Sprintf("m%d", msg)
		type reply struct {
			res turnResult
			err error
		}
		resc := make(chan reply, 1)
		go func() {
			res, err := askAgent(ctx, p.url, key, id, "NODES "+args)
			resc <- reply{res, err}
		}()
		g.Eventually(func() int { return strings.Count(nd.Stdout(), "Allow? [y/N]") }).WithTimeout(60*time.Second).
			Should(Equal(prompts+1), nd.Stderr)
		_, err := io.WriteString(nd.Stdin, answerWith+"\n")
		g.Expect(err).NotTo(HaveOccurred())
		r := <-resc // askAgent ends with ctx at the latest
		g.Expect(r.err).NotTo(HaveOccurred(), args)
		return r.res
	}
	run := `{"action":"run","command":["sh","-c","echo hi; echo $FOO >&2"],"env":["FOO=bar"]}`
	res := answer("y", run)
	g.Expect(res.Final).To(And(HavePrefix("RESULT:"), ContainSubstring("exit code 0"), ContainSubstring("hi"), ContainSubstring("bar")))
	g.Expect(nd.Stdout()).To(ContainSubstring("FOO=bar sh -c 'echo hi; echo $FOO >&2'"), "the user saw the whole command")
	res = answer("n", `{"action":"run","command":["touch","`+filepath.Join(nodeDir, "denied")+`"]}`)
	g.Expect(res.Final).To(And(HavePrefix("ERROR:"), ContainSubstring("denied")))
	g.Expect(filepath.Join(nodeDir, "denied")).NotTo(BeAnExistingFile())

	// An allowlisted command runs without a prompt.
	g.Expect(os.WriteFile(filepath.Join(nodeDir, "allowlist"), []byte("# safe\necho **\n"), 0o600)).To(Succeed())
	prompts := strings.Count(nd.Stdout(), "Allow?")
	g.Expect(agent(`{"action":"run","command":["echo","allowed"]}`).Final).To(And(HavePrefix("RESULT:"), ContainSubstring("allowed")))
	g.Expect(strings.Count(nd.Stdout(), "Allow?")).To(Equal(prompts))

	// Invalid arguments are the model's to fix.
	for args, want := range map[string]string{
		`{"action":"run","command":[]}`:                            "run needs command",
		`{"action":"run","command":["echo"],"env":["NOEQ"]}`:       "is not KEY=VAL",
		`{"action":"notify","node":"testbox"}`:                     "notify needs body",
		`{"action":"approve"}`:                                     "approve needs node",
		`{"action":"fly"}`:                                         "fly",
		`{"action":"location_get"}`:                                "not supported on this node",
		`{"action":"run","command":["echo"],"commandTimeoutMs":0}`: "commandTimeoutMs",
	} {
		g.Expect(agent(args).Final).To(And(HavePrefix("ERROR:"), ContainSubstring(want)), args)
	}

	// notify reaches the notification server on the session bus.
	g.Expect(agent(`{"action":"notify","title":"Build","body":"All green"}`).Final).To(HavePrefix("RESULT:"))
	g.Eventually(notes.got).Should(Receive(Equal([2]string{"Build", "All green"})))

	// screen_record records the X display as an mp4.
	res = agent(`{"action":"screen_record","durationMs":1000}`)
	g.Expect(res.Final).To(And(HavePrefix("RESULT:"), MatchRegexp(`FILE:nodes/`+id+`/screen-record-\S+\.mp4`)))
	g.Expect(res.Attachments).To(ContainElement(HaveField("MediaType", "video/mp4")))
	i := slices.IndexFunc(res.Attachments, func(a attachment) bool { return a.MediaType == "video/mp4" })
	video := fetchArtifact(ctx, g, p.url, key, res.Attachments[i].URL)
	g.Expect(len(video)).To(BeNumerically(">", 8))
	g.Expect(string(video[4:8])).To(Equal("ftyp"), "an mp4")

	// The approval is stored: after a restart the node reconnects and is
	// still approved.
	p.stop()
	p = serveArgs(t, dir, []string{"--addr", addr, "--api-key", key}, secret)
	g.Eventually(func() ([]client.Node, error) { return c.Nodes(ctx, "approved") }).WithTimeout(90*time.Second).
		Should(ContainElement(And(HaveField("ID", id), HaveField("Connected", true))), nd.Stderr)
	g.Expect(agent(`{"action":"run","node":"testbox","command":["echo","again"]}`).Final).To(ContainSubstring("again"))

	// A second node: the agent rejects it when the user asks; the node is
	// told and ends.
	other := nodeproc.Start(t, picobotBin, p.url, key, t.TempDir(), "stranger")
	otherID := other.ID(g)
	g.Eventually(func() ([]client.Node, error) { return c.Nodes(ctx, "pending") }).WithTimeout(30 * time.Second).
		Should(ContainElement(HaveField("ID", otherID)))
	g.Expect(agent(`{"action":"reject","node":"` + otherID + `"}`).Final).To(ContainSubstring("is rejected"))
	g.Eventually(other.Done()).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(other.Err()).To(HaveOccurred())
	g.Expect(other.Stderr()).To(ContainSubstring("rejected"))

	// Revoking the first disconnects it; its process ends, and the agent
	// can no longer reach it.
	_, err = c.DecideNode(ctx, id, "revoke")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(nd.Done()).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Expect(nd.Stderr()).To(ContainSubstring("revoked"))
	g.Expect(agent(`{"action":"run","node":"` + id + `","command":["echo","hi"]}`).Final).To(HavePrefix("ERROR:"))
	_, err = c.DecideNode(ctx, id, "reject")
	g.Expect(err).To(MatchError(ContainSubstring("which is revoked")))

	// Every call of the tool is in the audit log.
	var audit struct {
		Records []struct {
			Tool, Outcome string
		} `json:"records"`
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/audit?tool=nodes&limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.NewDecoder(resp.Body).Decode(&audit)).To(Succeed())
	_ = resp.Body.Close()
	g.Expect(audit.Records).To(HaveLen(msg))
	g.Expect(audit.Records).To(ContainElement(HaveField("Outcome", "error")))
	g.Expect(audit.Records).To(ContainElement(HaveField("Outcome", "ok")))
}

func fetchArtifact(ctx context.Context, g Gomega, base, key, path string) []byte {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var b bytes.Buffer
	_, err = io.Copy(&b, resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return b.Bytes()
}
