package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/tracing"
)

// Sentinel errors of Lookup; match them with errors.Is.
var (
	ErrUnknownAgent   = errors.New("unknown agent")
	ErrUnknownChannel = errors.New("unknown channel")
)

// InboundFunc receives each verified, de-duplicated inbound message. ctx
// carries the tenant (store.WithTenant). An error makes the webhook answer
// 5xx (or the poller retry), so the platform delivers the message again;
// return only after the message is durably queued.
type InboundFunc func(ctx context.Context, agent string, in Inbound) error

// BaseURLs are the platforms' API roots; empty fields use the public ones.
// Tests point them at local fakes.
type BaseURLs struct {
	Telegram string // https://api.telegram.org
	Feishu   string // https://open.feishu.cn (https://open.larksuite.com for Lark)
	Slack    string // https://slack.com/api/
}

// Defaults of a Manager.
const (
	DefaultPollTimeout = 30 * time.Second
	DefaultDedupSize   = 50000
	// DefaultDedupTTL covers the platforms' redelivery windows (Telegram
	// keeps updates for 24 hours).
	DefaultDedupTTL = 25 * time.Hour
	// MaxBodyBytes caps a webhook request body.
	MaxBodyBytes = 1 << 20
	// SignatureWindow is how far a signed request's timestamp may be from
	// now before it is refused as a replay.
	SignatureWindow = 5 * time.Minute
)

// Options configure a Manager.
type Options struct {
	// OnInbound receives inbound messages (required).
	OnInbound InboundFunc
	BaseURLs  BaseURLs
	// HTTPClient calls the platform APIs (a client with a 60 s timeout when nil).
	HTTPClient *http.Client
	// PublicURL is the externally reachable root the gateway serves
	// /hooks/... under (https://bot.example.com). When set, Telegram
	// channels with a webhookSecret register their webhook there at start.
	PublicURL string
	// PollTimeout is the long-poll timeout of Telegram getUpdates.
	PollTimeout time.Duration
	// DedupSize and DedupTTL bound the memory of seen message ids.
	DedupSize int
	DedupTTL  time.Duration
	Clock     clock.WithTicker
	Log       *slog.Logger
	// TracerProvider starts the trace of each inbound message (a webhook
	// request or a polled update) handed to OnInbound; nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Status describes one configured channel of an agent.
type Status struct {
	Name string                      `json:"name"`
	Type picobotv1alpha1.ChannelType `json:"type"`
	// Ready: the channel has the credentials it needs.
	Ready bool `json:"ready"`
	// Mode is how messages arrive: webhook, polling, or "" for gateway
	// clients (web, terminal).
	Mode    string `json:"mode,omitempty"`
	Message string `json:"message,omitempty"`
}

// Manager holds the channels of the agents of every tenant it serves, routes
// webhooks to them and runs their pollers. Safe for concurrent use.
type Manager struct {
	opts   Options
	log    *slog.Logger
	tracer trace.Tracer
	dedup  *bus.Dedup

	mu       sync.Mutex
	agents   map[agentKey]*agentChannels
	inflight map[string]struct{}
	runCtx   context.Context // set while Start runs
	wg       sync.WaitGroup
}

type agentKey struct{ tenant, agent string }

type agentChannels struct {
	channels map[string]hosted
	status   []Status
	cancel   context.CancelFunc // stops the runners; nil when none run
}

// hosted is a configured channel with its optional inbound sides.
type hosted struct {
	Channel
	recv receiver // nil: no webhook
	run  runner   // nil: nothing to run in the background
}

// NewManager returns a Manager without agents; add them with SetAgent.
func NewManager(opts Options) *Manager {
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = DefaultPollTimeout
	}
	if opts.DedupSize <= 0 {
		opts.DedupSize = DefaultDedupSize
	}
	if opts.DedupTTL <= 0 {
		opts.DedupTTL = DefaultDedupTTL
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.OnInbound == nil {
		opts.OnInbound = func(context.Context, string, Inbound) error {
			return errors.New("no inbound handler configured")
		}
	}
	opts.PublicURL = strings.TrimRight(opts.PublicURL, "/")
	return &Manager{opts: opts, log: opts.Log, tracer: tracing.Tracer(opts.TracerProvider), dedup: bus.NewDedup(opts.DedupSize, opts.DedupTTL, opts.Clock),
		agents: map[agentKey]*agentChannels{}, inflight: map[string]struct{}{}}
}

// SecretFunc returns a Secret of the agent's namespace by name, nil when it
// does not exist.
type SecretFunc func(name string) *corev1.Secret

// SetAgent (re)configures the channels of an agent from its spec.channels,
// replacing the previous set (whose pollers stop). A channel whose Secret or
// keys are missing is left out and reported in the returned error and in
// Status; the others work.
func (m *Manager) SetAgent(tenant string, a *picobotv1alpha1.Agent, secrets SecretFunc) error {
	if secrets == nil {
		secrets = func(string) *corev1.Secret { return nil }
	}
	set := &agentChannels{channels: map[string]hosted{}}
	var errs []error
	for _, spec := range a.Spec.Channels {
		name := spec.Name
		if name == "" {
			name = string(spec.Type)
		}
		st := Status{Name: name, Type: spec.Type}
		if _, dup := set.channels[name]; dup || slices.ContainsFunc(set.status, func(s Status) bool { return s.Name == name }) {
			st.Message = fmt.Sprintf("another channel is already named %q; give each channel a distinct name", name)
			errs = append(errs, fmt.Errorf("channel %q of agent %s: %s", name, a.Name, st.Message))
			set.status = append(set.status, st)
			continue
		}
		if spec.Type == TypeWeb || spec.Type == TypeTerminal {
			st.Ready = true
			set.status = append(set.status, st)
			continue
		}
		h, err := m.build(tenant, a.Name, name, spec, secrets)
		if err != nil {
			st.Message = err.Error()
			errs = append(errs, fmt.Errorf("channel %q of agent %s: %w", name, a.Name, err))
			set.status = append(set.status, st)
			continue
		}
		st.Ready = true
		switch {
		case h.recv != nil:
			st.Mode = "webhook"
		case h.run != nil:
			st.Mode = "polling"
		}
		set.channels[name] = h
		set.status = append(set.status, st)
	}

	key := agentKey{tenant, a.Name}
	m.mu.Lock()
	// Stop the old pollers first: Telegram refuses two getUpdates at once.
	if old := m.agents[key]; old != nil && old.cancel != nil {
		old.cancel()
	}
	m.agents[key] = set
	if m.runCtx != nil {
		m.startLocked(key, set)
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

// RemoveAgent drops an agent's channels and stops their pollers.
func (m *Manager) RemoveAgent(tenant, agent string) {
	m.mu.Lock()
	old := m.agents[agentKey{tenant, agent}]
	delete(m.agents, agentKey{tenant, agent})
	m.mu.Unlock()
	if old != nil && old.cancel != nil {
		old.cancel()
	}
}

func (m *Manager) build(tenant, agent, name string, spec picobotv1alpha1.Channel, secrets SecretFunc) (hosted, error) {
	if spec.SecretRef == nil || spec.SecretRef.Name == "" {
		return hosted{}, fmt.Errorf("a %s channel needs secretRef naming a Secret with its credentials", spec.Type)
	}
	sec := secrets(spec.SecretRef.Name)
	if sec == nil {
		return hosted{}, fmt.Errorf("secret %q not found", spec.SecretRef.Name)
	}
	get := func(key string) string {
		if v, ok := sec.Data[key]; ok {
			return strings.TrimSpace(string(v))
		}
		return strings.TrimSpace(sec.StringData[key])
	}
	need := func(keys ...string) error {
		var missing []string
		for _, k := range keys {
			if get(k) == "" {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("secret %q lacks key(s) %s", spec.SecretRef.Name, strings.Join(missing, ", "))
		}
		return nil
	}
	env := buildEnv{name: name, hc: m.opts.HTTPClient, clock: m.opts.Clock, log: m.log.With("channel", name, "agent", agent, "tenant", tenant)}
	switch spec.Type {
	case TypeTelegram:
		if err := need(KeyTelegramToken); err != nil {
			return hosted{}, err
		}
		hookURL := ""
		if m.opts.PublicURL != "" {
			hookURL = m.opts.PublicURL + HookPath(tenant, agent, name)
		}
		return newTelegram(env, m.opts.BaseURLs.Telegram, get(KeyTelegramToken), get(KeyTelegramWebhookSecret), hookURL, m.opts.PollTimeout), nil
	case TypeFeishu:
		if err := need(KeyFeishuAppID, KeyFeishuAppSecret); err != nil {
			return hosted{}, err
		}
		if get(KeyFeishuVerifyToken) == "" && get(KeyFeishuEncryptKey) == "" {
			return hosted{}, fmt.Errorf("secret %q needs %s or %s to verify events", spec.SecretRef.Name, KeyFeishuVerifyToken, KeyFeishuEncryptKey)
		}
		return newFeishu(env, m.opts.BaseURLs.Feishu, get(KeyFeishuAppID), get(KeyFeishuAppSecret), get(KeyFeishuVerifyToken), get(KeyFeishuEncryptKey)), nil
	case TypeSlack:
		if err := need(KeySlackBotToken, KeySlackSigningSecret); err != nil {
			return hosted{}, err
		}
		return newSlack(env, m.opts.BaseURLs.Slack, get(KeySlackBotToken), get(KeySlackSigningSecret)), nil
	case TypeWebhook:
		if err := need(KeyWebhookSigningSecret); err != nil {
			return hosted{}, err
		}
		return newWebhook(env, get(KeyWebhookSigningSecret), get(KeyWebhookURL)), nil
	}
	return hosted{}, fmt.Errorf("unsupported channel type %q", spec.Type)
}

// buildEnv is what every channel implementation gets from the Manager.
type buildEnv struct {
	name  string
	hc    *http.Client
	clock clock.WithTicker
	log   *slog.Logger
}

// HookPath is the path of a channel's webhook below the gateway root.
func HookPath(tenant, agent, channel string) string {
	return "/hooks/" + tenant + "/" + agent + "/" + channel
}

// Lookup returns an agent's channel by name. Web and terminal channels are
// not here: they are gateway clients.
func (m *Manager) Lookup(tenant, agent, name string) (Channel, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.agents[agentKey{tenant, agent}]
	if set == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownAgent, agent)
	}
	h, ok := set.channels[name]
	if !ok {
		names := make([]string, 0, len(set.channels))
		for n := range set.channels {
			names = append(names, n)
		}
		sort.Strings(names)
		avail := "none"
		if len(names) > 0 {
			avail = strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("%w %q of agent %s (its channels: %s)", ErrUnknownChannel, name, agent, avail)
	}
	return h.Channel, nil
}

// Status lists an agent's channels as its spec declares them; nil for an
// unknown agent.
func (m *Manager) Status(tenant, agent string) []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	if set := m.agents[agentKey{tenant, agent}]; set != nil {
		return slices.Clone(set.status)
	}
	return nil
}

// Start runs the channels' background work (Telegram long polling, webhook
// registration) until ctx ends, then waits for it to stop. It implements
// controller-runtime's manager.Runnable. Agents set while it runs start at
// once.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.runCtx != nil {
		m.mu.Unlock()
		return errors.New("channel manager already started")
	}
	m.runCtx = ctx
	for key, set := range m.agents {
		m.startLocked(key, set)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.runCtx = nil // agents set from now on start nothing
	for _, set := range m.agents {
		if set.cancel != nil {
			set.cancel()
			set.cancel = nil
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

func (m *Manager) startLocked(key agentKey, set *agentChannels) {
	var runners []hosted
	for _, h := range set.channels {
		if h.run != nil {
			runners = append(runners, h)
		}
	}
	if len(runners) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(m.runCtx)
	set.cancel = cancel
	for _, h := range runners {
		m.wg.Go(func() {
			h.run.run(ctx, func(ctx context.Context, ev event) error { return m.handOn(ctx, key, h.Name(), ev) })
		})
	}
}
