package nodes_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/nodes"
)

// recordingPeer stands for a node's WebSocket: it records the invokes the
// hub sends and answers them through the hub.
type recordingPeer struct {
	hub     *node.Hub
	invokes []node.Invoke
}

func (p *recordingPeer) Send(typ string, payload any) {
	if typ == node.FrameInvoke {
		inv := payload.(node.Invoke)
		p.invokes = append(p.invokes, inv)
		go p.hub.Deliver("acme", "box", node.Result{ID: inv.ID, Media: []node.Media{{Name: "snap.png", MediaType: "image/png", Data: []byte("\x89PNG")}}})
	}
}

func (p *recordingPeer) Close(string) {}

// TestArgumentsAndResults: the model's mistakes come back as tool errors
// before anything reaches the node; a pairing decision goes through the
// tool; an image a node returns becomes an artifact and MEDIA:<path> in
// the session's workspace.
func TestArgumentsAndResults(t *testing.T) {
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), "acme")
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = st.Close() }()
	hub := node.NewHub()
	svc := &node.Service{Store: st, Hub: hub}
	peer := &recordingPeer{hub: hub}
	_, detach, err := svc.Connect(ctx, node.Hello{ID: "box", Name: "Box", Capabilities: []string{node.ActionRun, node.ActionCameraSnap}}, peer)
	g.Expect(err).NotTo(HaveOccurred())
	defer detach()
	reg, err := tool.NewRegistry(nodes.New(svc, "acme", nil))
	g.Expect(err).NotTo(HaveOccurred())
	ws := t.TempDir()
	call := func(args string) tool.Result {
		return reg.Execute(ctx, tool.Env{Workspace: ws}, llm.ToolCall{ID: "c", Name: nodes.Name, Arguments: args})
	}

	res := call(`{"action":"pending"}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring(`"id": "box"`))
	res = call(`{"action":"approve","node":"Box"}`)
	g.Expect(res.Content).To(Equal("Node box (Box) is approved."))
	res = call(`{"action":"reject","node":"box"}`)
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("revoke it instead"))

	for args, want := range map[string]string{
		`{"action":"run"}`:                                            "run needs command",
		`{"action":"run","command":[""]}`:                             "run needs command",
		`{"action":"run","command":["ls"],"env":["1X=2"]}`:            `env entry "1X=2" is not KEY=VAL`,
		`{"action":"notify","command":["ls"]}`:                        "belong to run, not notify",
		`{"action":"run","command":["ls"],"invokeTimeoutMs":9999999}`: "invokeTimeoutMs",
		`{"action":"run","command":["ls"],"node":"nope"}`:             `no approved node "nope"`,
		`{"action":"screen_record"}`:                                  "screen_record is not supported on this node",
		`{"action":"teleport"}`:                                       "teleport",
		`{"action":"run","command":"ls"}`:                             "command",
	} {
		res := call(args)
		g.Expect(res.IsError).To(BeTrue(), args)
		g.Expect(res.Content).To(ContainSubstring(want), args)
	}
	g.Expect(peer.invokes).To(BeEmpty(), "no invalid call reached the node")

	res = call(`{"action":"camera_snap"}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("MEDIA:" + filepath.Join("nodes", "box", "snap.png")))
	g.Expect(res.Artifacts).To(HaveLen(1))
	g.Expect(res.Artifacts[0].MediaType).To(Equal("image/png"))
	g.Expect(filepath.Join(ws, "nodes", "box", "snap.png")).To(BeAnExistingFile())
	g.Expect(peer.invokes).To(HaveLen(1))
	var params map[string]any
	g.Expect(json.Unmarshal(peer.invokes[0].Params, &params)).To(Succeed())
}
