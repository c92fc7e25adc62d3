// Package device is `picobot node`: the client a user runs on their own
// machine to pair it with a tenant. It connects out to the gateway's
// WebSocket with the user's API key (no inbound port), says hello with its
// id, name, platform and capabilities, and waits for the user to approve it.
// An approved node answers the gateway's invokes: it runs commands only
// when its local allowlist permits them or its user says yes at its own
// prompt (the device's owner decides, not the agent), shows desktop
// notifications (D-Bus on Linux, osascript on macOS) and records the screen
// or the camera where ffmpeg and a display or camera are there.
package device

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/store"
)

// protocolVersion is the gateway protocol's version (docs/protocol.md).
const protocolVersion = 1

// ErrRefused is returned by Run when the user rejected or revoked the node.
var ErrRefused = errors.New("node refused by its user")

// Config configures a node.
type Config struct {
	// Gateway is the gateway's root URL (http:// or https://).
	Gateway string
	// APIKey is the user's key; empty for a keyless loopback gateway.
	APIKey string
	// ID is the node's id; Name its display name (the host name when
	// empty).
	ID, Name string
	// Version is the build's version, reported in the hello.
	Version string
	// Capabilities are the actions offered (Detect when nil).
	Capabilities []string
	// Allowlist is the file of commands that run without asking (see
	// Allowlist); none when empty.
	Allowlist string
	// Prompt asks the device's user to approve a command; nil refuses
	// every command the allowlist does not permit.
	Prompt Prompter
	// Env is the environment of the node's own tools (os.Getenv when
	// nil): DISPLAY, DBUS_SESSION_BUS_ADDRESS.
	Env func(string) string
	// Reconnect is the longest wait between reconnects (30 s when zero);
	// a negative value does not reconnect.
	Reconnect time.Duration
	// OnState, when set, is told each state the gateway gives.
	OnState func(node.State)
	Log     *slog.Logger
}

// frame is a gateway WebSocket frame as the node reads and writes it.
type frame struct {
	V       int             `json:"v"`
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Code    string          `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
	Node    json.RawMessage `json:"node,omitempty"`
}

// Node is a running node client.
type Node struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns a node.
func New(cfg Config) (*Node, error) {
	u, err := url.Parse(cfg.Gateway)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway %q is not an http:// or https:// URL", cfg.Gateway)
	}
	if err := store.ValidateNodeID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.Env == nil {
		cfg.Env = os.Getenv
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Capabilities == nil {
		cfg.Capabilities = Detect(cfg.Env)
	}
	if cfg.Reconnect == 0 {
		cfg.Reconnect = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Node{cfg: cfg, log: cfg.Log}, nil
}

// Capabilities are the actions the node offers.
func (n *Node) Capabilities() []string { return n.cfg.Capabilities }

// Run connects and serves until ctx ends or the user refuses the node
// (ErrRefused); a lost connection is retried with backoff.
func (n *Node) Run(ctx context.Context) error {
	wait := time.Second
	for {
		start := time.Now()
		err := n.session(ctx)
		switch {
		case ctx.Err() != nil:
			return nil //nolint:nilerr // a cancelled context is how the node is told to stop

		case errors.Is(err, ErrRefused), n.cfg.Reconnect < 0:
			return err
		}
		if time.Since(start) > time.Minute {
			wait = time.Second // it was up a while: a new outage
		}
		n.log.Warn("Connection to the gateway lost; reconnecting", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, n.cfg.Reconnect)
	}
}

// conn is one WebSocket to the gateway; writes are serialised.
type conn struct {
	ws *websocket.Conn
	mu sync.Mutex
}

func (c *conn) send(ctx context.Context, f frame) error {
	f.V = protocolVersion
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return c.ws.Write(wctx, websocket.MessageText, b)
}

func (n *Node) dial(ctx context.Context) (*websocket.Conn, error) {
	u, _ := url.Parse(n.cfg.Gateway)
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/ws"
	opts := &websocket.DialOptions{}
	if n.cfg.APIKey != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + n.cfg.APIKey}}
	}
	ws, res, err := websocket.Dial(ctx, u.String(), opts)
	if res != nil && res.Body != nil {
		_ = res.Body.Close()
	}
	if err != nil {
		if res != nil && res.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("failed to connect to %s: the API key was not accepted: %w", n.cfg.Gateway, ErrRefused)
		}
		return nil, fmt.Errorf("failed to connect to %s: %w", n.cfg.Gateway, err)
	}
	ws.SetReadLimit(1 << 20)
	return ws, nil
}

// session is one connection: hello, then invokes until it breaks.
func (n *Node) session(ctx context.Context) error {
	ws, err := n.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ws.CloseNow() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &conn{ws: ws}
	hello, _ := json.Marshal(node.Hello{ID: n.cfg.ID, Name: n.cfg.Name, Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Version: n.cfg.Version, Capabilities: n.cfg.Capabilities})
	if err := c.send(ctx, frame{Type: node.FrameHello, ID: "hello", Node: hello}); err != nil {
		return fmt.Errorf("failed to say hello to the gateway: %w", err)
	}
	go n.keepAlive(ctx, ws)
	var calls sync.WaitGroup
	defer calls.Wait()
	defer cancel() // before Wait: calls in flight end with the connection
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if s := websocket.CloseStatus(err); s == websocket.StatusPolicyViolation {
				return fmt.Errorf("the gateway closed the connection: %w", ErrRefused)
			}
			return err
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			continue
		}
		switch f.Type {
		case node.FrameState:
			var s node.State
			if json.Unmarshal(f.Node, &s) != nil {
				continue
			}
			n.log.Info("Node state", "node", n.cfg.ID, "state", s.State, "message", s.Message)
			if n.cfg.OnState != nil {
				n.cfg.OnState(s)
			}
			if s.State == string(store.NodeRejected) || s.State == string(store.NodeRevoked) {
				return fmt.Errorf("node %s: %s: %w", s.State, s.Message, ErrRefused)
			}
		case node.FrameInvoke:
			var inv node.Invoke
			if json.Unmarshal(f.Node, &inv) != nil || inv.ID == "" {
				continue
			}
			calls.Go(func() {
				r := n.Handle(ctx, inv)
				r.ID = inv.ID
				b, err := json.Marshal(r)
				if err == nil {
					err = c.send(ctx, frame{Type: node.FrameResult, ID: inv.ID, Node: b})
				}
				if err != nil {
					n.log.Warn("Could not answer an invoke", "action", inv.Action, "err", err)
				}
			})
		case "error":
			n.log.Warn("Gateway error", "code", f.Code, "message", f.Message)
			if f.ID == "hello" {
				return fmt.Errorf("the gateway refused the hello: %s: %s: %w", f.Code, f.Message, ErrRefused)
			}
		}
	}
}

// keepAlive pings the gateway so idle connections survive NATs and
// proxies; a failed ping ends the connection (and Run reconnects).
func (n *Node) keepAlive(ctx context.Context, ws *websocket.Conn) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err := ws.Ping(pctx)
			cancel()
			if err != nil {
				_ = ws.Close(websocket.StatusGoingAway, "ping failed")
				return
			}
		}
	}
}

// LoadID returns the node id kept in dir (node-id), creating one when
// there is none or reset is set.
func LoadID(dir string, reset bool) (string, error) {
	path := filepath.Join(dir, "node-id")
	if !reset {
		b, err := os.ReadFile(path)
		if err == nil {
			id := strings.TrimSpace(string(b))
			if err := store.ValidateNodeID(id); err != nil {
				return "", fmt.Errorf("failed to read the node id in %q: %w", path, err)
			}
			return id, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("failed to read the node id in %q: %w", path, err)
		}
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := "n-" + hex.EncodeToString(b[:])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("failed to create the node's folder %q: %w", dir, err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("failed to save the node id in %q: %w", path, err)
	}
	return id, nil
}
