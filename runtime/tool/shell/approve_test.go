package shell_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/shell"
)

// user is the person asked at the tool boundary: it answers each request
// with the next of its answers and records what it was asked.
type user struct {
	mu      sync.Mutex
	answers []bool
	asked   []tool.ApprovalRequest
}

func (u *user) Approve(_ context.Context, req tool.ApprovalRequest) (bool, string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.asked = append(u.asked, req)
	ok := u.answers[0]
	u.answers = u.answers[1:]
	if !ok {
		return false, "the user denied it", nil
	}
	return true, "", nil
}

func (h *harness) callWith(approver tool.Approver, name string, args any) tool.Result {
	h.t.Helper()
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(h.t.Context(), hangGuard)
	defer cancel()
	return h.reg.Execute(ctx, tool.Env{Workspace: h.ws, SessionID: "s1", Approver: approver}, llm.ToolCall{ID: "c", Name: name, Arguments: string(raw)})
}

// TestApprovalPolicyInTheShellTools runs real bash under an allowlist with
// ask on-miss: allowlisted commands run unasked, the others run only when
// the user approves, in bash, exec and pty alike; without a user to ask they
// are refused; destructive ones are refused without asking.
func TestApprovalPolicyInTheShellTools(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, shell.WithApprovals(approval.Policy{Security: approval.SecurityAllowlist, Ask: approval.AskOnMiss,
		Allowlist: []string{"echo *"}}))
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(h.ws, name)); return err == nil }
	u := &user{answers: []bool{false, true, true}}

	g.Expect(h.callWith(u, "bash", map[string]any{"command": "echo unasked"}).Content).To(Equal("unasked\n[exit code 0]"))
	g.Expect(u.asked).To(BeEmpty())

	r := h.callWith(u, "bash", map[string]any{"command": "touch denied.txt"})
	g.Expect(r.IsError).To(BeTrue())
	g.Expect(r.Content).To(ContainSubstring("the command was not run: the user denied it"))
	g.Expect(exists("denied.txt")).To(BeFalse())

	r = h.callWith(u, "exec", map[string]any{"command": "touch approved.txt && echo made"})
	g.Expect(r.Content).To(ContainSubstring("made"))
	g.Expect(exists("approved.txt")).To(BeTrue())

	r = h.callWith(u, "pty", map[string]any{"action": "spawn", "command": "printf from-pty", "wait_ms": 1000})
	g.Expect(r.IsError).To(BeFalse(), r.Content)
	g.Expect(u.asked).To(HaveLen(3))
	g.Expect([]string{u.asked[0].Tool, u.asked[1].Tool, u.asked[2].Tool}).To(Equal([]string{"bash", "exec", "pty"}))
	g.Expect(u.asked[0].Command).To(Equal("touch denied.txt"))
	g.Expect(u.asked[0].Reason).To(ContainSubstring("not in this agent's allowlist"))

	r = h.callWith(nil, "bash", map[string]any{"command": "touch nobody.txt"})
	g.Expect(r.IsError).To(BeTrue())
	g.Expect(r.Content).To(ContainSubstring("this turn has no user to ask"))
	g.Expect(exists("nobody.txt")).To(BeFalse())

	r = h.callWith(u, "exec", map[string]any{"command": "echo x > /dev/sda"})
	g.Expect(r.IsError).To(BeTrue())
	g.Expect(r.Content).To(And(ContainSubstring("block device"), ContainSubstring("no sandbox")))
	g.Expect(u.asked).To(HaveLen(3), "destructive commands are refused without asking")
}

// TestSecurityDenyRefusesEveryCommand: security deny runs nothing, asked or
// not.
func TestSecurityDenyRefusesEveryCommand(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, shell.WithApprovals(approval.Policy{Security: approval.SecurityDeny, Ask: approval.AskAlways}))
	u := &user{answers: []bool{true}}
	for _, name := range []string{"bash", "exec"} {
		r := h.callWith(u, name, map[string]any{"command": "touch x"})
		g.Expect(r.IsError).To(BeTrue())
		g.Expect(r.Content).To(ContainSubstring("security: deny"))
	}
	g.Expect(u.asked).To(BeEmpty())
	_, err := os.Stat(filepath.Join(h.ws, "x"))
	g.Expect(os.IsNotExist(err)).To(BeTrue())
}

// TestExecInTheForegroundWhenProcessIsDenied: with the process tool denied,
// exec ignores background and yieldMs and returns the command's end.
func TestExecInTheForegroundWhenProcessIsDenied(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, shell.ExecForeground())
	r := h.call("exec", map[string]any{"command": "sleep 0.3; echo finished", "background": true})
	g.Expect(r.IsError).To(BeFalse(), r.Content)
	g.Expect(r.Content).To(ContainSubstring("finished"))
	g.Expect(r.Content).To(ContainSubstring("exit code 0"))
	g.Expect(r.Content).NotTo(ContainSubstring("running"))
	r = h.call("exec", map[string]any{"command": "sleep 0.3; echo again", "yieldMs": 0})
	g.Expect(r.Content).To(ContainSubstring("again"))
	g.Expect(h.call("process", map[string]any{"action": "list"}).Content).NotTo(ContainSubstring("running"))
}
