package embedded

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/tool/bot"
)

// agentKey names a tenant's agent in Runtime.running; waiterKey starts
// with it.
func agentKey(tenant, agent string) string { return tenant + "\x00" + agent + "\x00" }

// Instances reports embedded mode's one instance of an agent for
// bot_status: this process, and the chats it serves for the agent. It has
// no lease to renew (sessions are goroutines), so no heartbeat age: it is
// alive since it answers.
func (r *Runtime) Instances(_ context.Context, tenant, agent string) ([]bot.Instance, error) {
	host, _ := os.Hostname()
	prefix := bus.Key(tenant, agent, "chat") + ":"
	r.mu.Lock()
	chats := 0
	for key := range r.serving {
		if strings.HasPrefix(key, prefix) {
			chats++
		}
	}
	r.mu.Unlock()
	state := "idle"
	if chats > 0 {
		state = fmt.Sprintf("serving %d chat(s)", chats)
	}
	return []bot.Instance{{ID: fmt.Sprintf("%s/pid-%d", host, os.Getpid()), Kind: "picobot serve process", State: state}}, nil
}

// Queue reports what waits for a tenant's agent for bot_status: messages
// accepted (a client or chat platform waits for their answer) and not
// started yet, and turns in progress.
func (r *Runtime) Queue(_ context.Context, tenant, agent string) (bot.Queue, error) {
	prefix := agentKey(tenant, agent)
	r.mu.Lock()
	defer r.mu.Unlock()
	var waiting int64
	for key := range r.waiters {
		if strings.HasPrefix(key, prefix) {
			waiting++
		}
	}
	running := int64(r.running[prefix])
	return bot.Queue{Waiting: max(waiting-running, 0), Running: running}, nil
}
