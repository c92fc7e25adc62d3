// Package node pairs a tenant's own devices with its agents: `picobot node`
// runs on a user's machine and connects out to the gateway over the
// client WebSocket (docs/nodes.md); the gateway keeps the connection (Hub)
// and records the node in the store, pending until the user approves it;
// the agent's nodes tool reaches an approved node through Service, in the
// same process (embedded mode) or through the gateway replica that holds
// the connection (cluster mode, Remote).
package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Actions a node may offer (its capabilities) and the nodes tool invokes.
const (
	ActionRun          = "run"
	ActionNotify       = "notify"
	ActionScreenRecord = "screen_record"
	ActionCameraSnap   = "camera_snap"
	ActionCameraClip   = "camera_clip"
	ActionLocationGet  = "location_get"
)

// Actions lists every action a node can be invoked with.
func Actions() []string {
	return []string{ActionRun, ActionNotify, ActionScreenRecord, ActionCameraSnap, ActionCameraClip, ActionLocationGet}
}

// Frame types of the node's side of the WebSocket protocol.
const (
	// FrameHello (node → gateway) introduces the node: Hello.
	FrameHello = "node_hello"
	// FrameState (gateway → node) tells the node where it stands (after
	// its hello and whenever its user decides): State.
	FrameState = "node_state"
	// FrameInvoke (gateway → node) asks the node to act: Invoke.
	FrameInvoke = "node_invoke"
	// FrameResult (node → gateway) answers an invoke: Result.
	FrameResult = "node_result"
)

// Limits of the node protocol.
const (
	// MaxResultBytes bounds a node's result frame (media included); the
	// gateway raises a node connection's read limit to it after the hello.
	MaxResultBytes = 24 << 20
	// MaxMediaBytes bounds the media of one result.
	MaxMediaBytes = 16 << 20
	// DefaultInvokeTimeout is how long a call waits for the node's answer
	// when the caller says nothing (the node's own approval prompt is part
	// of it).
	DefaultInvokeTimeout = 2 * time.Minute
	// MaxInvokeTimeout bounds invokeTimeoutMs.
	MaxInvokeTimeout = 10 * time.Minute
)

// Hello is what a node says of itself when it connects.
type Hello struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Platform string `json:"platform,omitempty"`
	Version  string `json:"version,omitempty"`
	// Capabilities are the actions it offers (Actions).
	Capabilities []string `json:"capabilities,omitempty"`
}

// State tells a node where it stands.
type State struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// Invoke asks a node to act.
type Invoke struct {
	// ID matches the Result to the call.
	ID     string          `json:"id"`
	Action string          `json:"action"`
	Params json.RawMessage `json:"params,omitempty"`
	// TimeoutMS is how long the gateway waits for the answer.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// RunParams are the parameters of ActionRun.
type RunParams struct {
	Command              []string `json:"command"`
	Cwd                  string   `json:"cwd,omitempty"`
	Env                  []string `json:"env,omitempty"`
	CommandTimeoutMS     int64    `json:"commandTimeoutMs,omitempty"`
	NeedsScreenRecording bool     `json:"needsScreenRecording,omitempty"`
}

// NotifyParams are the parameters of ActionNotify.
type NotifyParams struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body"`
}

// MediaParams are the parameters of the capture actions.
type MediaParams struct {
	// DurationMS is the length of a clip or recording.
	DurationMS int64 `json:"durationMs,omitempty"`
}

// Result codes: why a node did not do what it was asked.
const (
	// CodeUnsupported: the node does not offer the action (not on this OS,
	// or the tool it needs is missing).
	CodeUnsupported = "unsupported"
	// CodeDenied: the node's user (or allowlist) refused.
	CodeDenied = "denied"
	// CodeFailed: the action ran and failed.
	CodeFailed = "failed"
	// CodeBadRequest: the parameters are wrong.
	CodeBadRequest = "bad_request"
)

// Result is a node's answer to an Invoke.
type Result struct {
	ID string `json:"id"`
	// Code is empty on success, else why not (Code* constants); Error
	// says it in words.
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Text is a human-readable summary.
	Text string `json:"text,omitempty"`
	// Run: the command's exit code and output.
	ExitCode *int   `json:"exit_code,omitempty"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	// Data is a structured payload (location_get's JSON).
	Data json.RawMessage `json:"data,omitempty"`
	// Media are captured files (an image, an mp4).
	Media []Media `json:"media,omitempty"`
}

// Media is a file a node captured.
type Media struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"`
}

// Errors of Service calls.
var (
	// ErrNotConnected: the node exists but no gateway holds a connection
	// to it now.
	ErrNotConnected = errors.New("node is not connected")
	// ErrNotApproved: the node is not approved (pending, rejected or
	// revoked), so it takes no calls.
	ErrNotApproved = errors.New("node is not approved")
	// ErrRefused: the node may not connect (rejected or revoked).
	ErrRefused = errors.New("node was refused")
	// ErrTimeout: the node did not answer in time.
	ErrTimeout = errors.New("node did not answer in time")
)

// ParseHello reads a hello frame's payload.
func ParseHello(raw json.RawMessage) (Hello, error) {
	var h Hello
	if len(raw) == 0 {
		return h, errors.New("a node_hello frame needs a node object")
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("failed to read the node hello: %w", err)
	}
	return h, nil
}
