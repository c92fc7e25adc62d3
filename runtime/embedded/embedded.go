// Package embedded runs PicoBot in one process (`picobot serve`): the agents
// of a manifests folder, sessions as goroutines on SQLite, the in-process bus
// and a local artifact folder, behind the same gateway protocol as cluster
// mode.
package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/artifact"
	"github.com/picobot/picobot/runtime/blob/localblob"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/membus"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/manifest"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/sqlite"
)

// Channel is the channel name of gateway clients.
const Channel = "web"

const (
	consumerGroup = "runtime"
	workerIdle    = time.Minute
)

// Options configure a Runtime.
type Options struct {
	// Dir holds the Agent/CronJob/BrowserProfile manifests (and Secrets or a
	// picobot-defaults ConfigMap).
	Dir string
	// StateDir holds picobot.db, artifacts and session workspaces
	// (Dir/.picobot when empty).
	StateDir string
	// Tenant scopes all state; the manifests' namespace in cluster terms.
	Tenant string
	// Env looks up environment variables (os.Getenv when nil): a secretKeyRef
	// {name: N, key: K} with no Secret manifest in Dir is read from
	// PICOBOT_SECRET_<N>_<K> (upper-case, other characters as '_').
	Env func(string) string
	Log *slog.Logger
	// Features add tools and prompt sections to every agent (memory,
	// skills, schedules, messaging, browser).
	Features []agenthost.Feature
}

// Runtime is a running embedded PicoBot. It implements gateway.Backend.
type Runtime struct {
	opts      Options
	store     store.Store
	bus       bus.Bus
	blobs     *localblob.Store
	artifacts artifact.Store
	agents    map[string]*agentRuntime
	log       *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	waiters map[string]*waiter // bus message id -> the gateway call waiting for it
	workers map[string]*worker // agent/chat -> its session goroutine
}

type waiter struct {
	sink func(agent.Event)
	done chan result
}

type result struct {
	out gateway.Outcome
	err error
}

type agentRuntime struct {
	*agenthost.Built
	name    string
	info    gateway.AgentInfo
	manager *session.Manager
	stream  string
}

// inbound is the bus payload of a client message.
type inbound struct {
	Agent, ChatID, ClientID, Text string
}

// Open loads the manifests and starts the runtime.
func Open(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Tenant == "" {
		opts.Tenant = manifest.DefaultNamespace
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(opts.Dir, ".picobot")
	}
	if opts.Env == nil {
		opts.Env = os.Getenv
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	set, err := manifest.Load(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("failed to load manifests from %s: %w", opts.Dir, err)
	}
	if len(set.Agents) == 0 {
		return nil, fmt.Errorf("no Agent manifest in %s: add one (see config/samples/agents_v1alpha1_agent.yaml)", opts.Dir)
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create state folder %s: %w", opts.StateDir, err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(opts.StateDir, sqlite.FileName))
	if err != nil {
		return nil, err
	}
	blobs, err := localblob.Open(filepath.Join(opts.StateDir, "artifacts"), localblob.Options{})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Runtime{opts: opts, store: st, bus: membus.New(membus.Options{}), agents: map[string]*agentRuntime{},
		log: opts.Log, ctx: store.WithTenant(rctx, opts.Tenant), cancel: cancel, blobs: blobs,
		artifacts: artifact.Store{Blobs: blobs, State: st},
		waiters:   map[string]*waiter{}, workers: map[string]*worker{}}
	secrets, defaults := otherObjects(set)
	// One process per state folder: a holder stable across restarts lets a
	// restarted (even crashed) process take its sessions back at once.
	host, _ := os.Hostname()
	abs, _ := filepath.Abs(opts.StateDir)
	holder := "embedded:" + host + ":" + abs
	for i := range set.Agents {
		a := &set.Agents[i]
		host := &agenthost.Host{Mode: agenthost.ModeEmbedded, Tenant: opts.Tenant, Store: st, Artifacts: r.artifacts,
			ArtifactURL: func(a store.Artifact) string { return "/api/v1/artifacts/" + a.ID },
			StateDir:    opts.StateDir, Holder: holder, Defaults: defaults, Log: opts.Log,
			Secrets: agenthost.EnvSecrets(secrets, opts.Env, a),
			SecretHint: func(sel corev1.SecretKeySelector) string {
				return fmt.Sprintf("Provide the key as a Secret manifest %q in %s or as the environment variable %s, then restart",
					sel.Name, opts.Dir, SecretEnvName(sel.Name, sel.Key))
			},
			Features: opts.Features,
		}
		built, err := host.Build(r.ctx, a)
		if err != nil {
			r.Close()
			return nil, err
		}
		ar := &agentRuntime{Built: built, name: a.Name, info: built.Info, manager: built.Manager, stream: bus.Key(opts.Tenant, a.Name, "in")}
		r.agents[a.Name] = ar
		r.wg.Go(func() { r.dispatch(ar) })
	}
	return r, nil
}

// otherObjects picks the Secrets and the picobot-defaults ConfigMap out of the
// manifests folder.
func otherObjects(set *manifest.Set) (map[string]*corev1.Secret, *corev1.ConfigMap) {
	secrets := map[string]*corev1.Secret{}
	var defaults *corev1.ConfigMap
	for _, u := range set.Other {
		switch u.GetKind() {
		case "Secret":
			s := &corev1.Secret{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s) == nil {
				for k, v := range s.StringData {
					if s.Data == nil {
						s.Data = map[string][]byte{}
					}
					s.Data[k] = []byte(v)
				}
				secrets[s.Name] = s
			}
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm) == nil && cm.Name == picobotv1alpha1.NamespaceDefaultsConfigMap {
				defaults = cm
			}
		}
	}
	return secrets, defaults
}

// SecretEnvName is the environment variable embedded mode reads a secretKeyRef
// from when the folder has no Secret of that name.
func SecretEnvName(name, key string) string { return agenthost.SecretEnvName(name, key) }

// Close stops the runtime: running turns are cancelled and recorded.
func (r *Runtime) Close() {
	r.cancel()
	r.wg.Wait()
	for _, a := range r.agents {
		a.Built.Close()
		if err := a.manager.ReleaseAll(store.WithTenant(context.Background(), r.opts.Tenant)); err != nil {
			r.log.Error("Failed to release session leases", "agent", a.name, "err", err)
		}
	}
	_ = r.bus.Close()
	_ = r.blobs.Close()
	_ = r.store.Close()
}

// Agents implements gateway.Backend.
func (r *Runtime) Agents() []gateway.AgentInfo {
	out := make([]gateway.AgentInfo, 0, len(r.agents))
	for _, a := range r.agents {
		out = append(out, a.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r *Runtime) agent(name string) (*agentRuntime, error) {
	a := r.agents[name]
	if a == nil {
		return nil, &gateway.CodedError{Code: gateway.CodeUnknownAgent, Err: fmt.Errorf("no agent %q", name)}
	}
	return a, nil
}

func chatOf(agentName, chatID string) string { return agentName + "/" + chatID }

// Handle implements gateway.Backend: the message goes through the in-process
// bus to the chat's session goroutine; /stop bypasses the queue.
func (r *Runtime) Handle(ctx context.Context, s gateway.Send) (gateway.Outcome, error) {
	a, err := r.agent(s.Agent)
	if err != nil {
		return gateway.Outcome{}, err
	}
	if cmd, ok := session.ParseCommand(s.Text); ok && cmd.Name == "stop" {
		stopped := r.Stop(s.Agent, s.ChatID)
		text := "Nothing is running."
		if stopped {
			text = "Stopped."
		}
		return gateway.Outcome{Command: "stop", Text: text}, nil
	}
	id := chatOf(s.Agent, s.ChatID) + "/" + s.ID
	w := &waiter{sink: s.Sink, done: make(chan result, 1)}
	r.mu.Lock()
	if _, busy := r.waiters[id]; busy {
		r.mu.Unlock()
		return gateway.Outcome{}, &gateway.CodedError{Code: gateway.CodeBusy, Err: fmt.Errorf("message %q is already being processed", s.ID)}
	}
	r.waiters[id] = w
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}()
	payload, _ := json.Marshal(inbound{Agent: s.Agent, ChatID: s.ChatID, ClientID: s.ID, Text: s.Text})
	if err := r.bus.Publish(ctx, a.stream, bus.Message{ID: id, Payload: payload}); err != nil {
		return gateway.Outcome{}, fmt.Errorf("failed to queue message: %w", err)
	}
	select {
	case res := <-w.done:
		return res.out, res.err
	case <-ctx.Done():
		return gateway.Outcome{}, ctx.Err()
	}
}

// Stop implements gateway.Backend: it cancels the chat's running turn and
// drops its queued messages.
func (r *Runtime) Stop(agentName, chatID string) bool {
	a := r.agents[agentName]
	if a == nil {
		return false
	}
	r.mu.Lock()
	w := r.workers[chatOf(agentName, chatID)]
	r.mu.Unlock()
	if w != nil {
		for _, m := range w.dropQueued() {
			if err := r.bus.Ack(r.ctx, a.stream, consumerGroup, m.Seq); err != nil {
				r.log.Error("Failed to acknowledge dropped message", "id", m.ID, "err", err)
			}
			r.answer(m.ID, result{out: gateway.Outcome{Command: "stop", Text: "Dropped by /stop before it ran."}})
		}
	}
	id, err := a.manager.Resolve(r.ctx, Channel, chatOf(agentName, chatID))
	if err != nil {
		return false
	}
	return a.manager.Stop(id.String())
}

// Sessions implements gateway.Backend.
func (r *Runtime) Sessions(ctx context.Context, agentName, chatID string) (string, []store.Session, error) {
	a, err := r.agent(agentName)
	if err != nil {
		return "", nil, err
	}
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	cur, err := r.store.CurrentDialog(ctx, Channel, chatOf(agentName, chatID))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", nil, err
	}
	list, err := a.manager.List(ctx, Channel, chatOf(agentName, chatID))
	return cur, list, err
}

// Messages implements gateway.Backend.
func (r *Runtime) Messages(ctx context.Context, sessionID string, last int) ([]store.Message, error) {
	if _, err := session.ParseID(sessionID); err != nil {
		return nil, &gateway.CodedError{Code: gateway.CodeBadRequest, Err: err}
	}
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	if _, err := r.store.GetSession(ctx, sessionID); err != nil {
		return nil, err
	}
	return r.store.LoadMessages(ctx, sessionID, store.LoadOptions{Last: last})
}

// Artifact implements gateway.Backend.
func (r *Runtime) Artifact(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error) {
	return r.artifacts.Open(store.WithTenant(ctx, r.opts.Tenant), id)
}

// Health implements gateway.Backend.
func (r *Runtime) Health(ctx context.Context) []gateway.Check {
	ctx = store.WithTenant(ctx, r.opts.Tenant)
	checks := []gateway.Check{}
	_, err := r.store.ListSessions(ctx, store.SessionFilter{Limit: 1})
	checks = append(checks, check("state database", err == nil, errText(err, "SQLite at "+filepath.Join(r.opts.StateDir, sqlite.FileName)),
		"check that "+r.opts.StateDir+" is writable"))
	for _, a := range r.Agents() {
		msg := a.Message
		fix := ""
		if !a.Ready {
			fix = "give the agent a model: set spec.model with an apiKeySecretRef, and provide the key as a Secret manifest in " +
				r.opts.Dir + " or as the environment variable PICOBOT_SECRET_<SECRET>_<KEY>"
		}
		checks = append(checks, check("agent "+a.Name+" model", a.Ready, msg, fix))
		if m := r.agents[a.Name].MCP; m != nil {
			for _, s := range m.Status() {
				msg := fmt.Sprintf("%s, %d tools", s.Transport, len(s.Tools))
				if !s.Connected {
					msg = s.Error
				}
				checks = append(checks, check("agent "+a.Name+" MCP server "+s.Name, s.Connected, msg,
					"check spec.mcpServers["+s.Name+"] of the agent; /mcp shows the detail"))
			}
		}
	}
	return checks
}

func check(name string, ok bool, msg, fix string) gateway.Check {
	c := gateway.Check{Name: name, OK: ok, Message: msg}
	if !ok {
		c.Fix = fix
	}
	return c
}

func errText(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
