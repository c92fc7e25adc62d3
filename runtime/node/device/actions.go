package device

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/picobot/picobot/runtime/node"
)

// Bounds of what a node sends back.
const (
	// maxOutput bounds a command's stdout and stderr each.
	maxOutput = 64 << 10
	// defaultCommandTimeout is a command's time limit when the call sets
	// none.
	defaultCommandTimeout = 2 * time.Minute
	// promptMargin is kept of an invoke's timeout for the command itself
	// and the answer's way back: the prompt waits for the rest.
	promptMargin = 5 * time.Second
	// notifyTimeout bounds showing a notification: a bus or daemon that
	// does not answer is the call's error, not a wait until the invoke's
	// own timeout.
	notifyTimeout = 20 * time.Second
)

// Detect returns the actions this machine can do: run always; notify with a
// D-Bus session bus (Linux) or osascript (macOS); screen_record with ffmpeg
// and an X display (Linux) or ffmpeg (macOS, AVFoundation); the camera
// actions with ffmpeg and a camera. location_get needs a location service
// that a command-line program cannot reach on either, so no node offers it.
func Detect(env func(string) string) []string {
	caps := []string{node.ActionRun}
	_, ffmpegErr := exec.LookPath("ffmpeg")
	ffmpeg := ffmpegErr == nil
	switch runtime.GOOS {
	case "linux":
		if env("DBUS_SESSION_BUS_ADDRESS") != "" {
			caps = append(caps, node.ActionNotify)
		}
		if ffmpeg && env("DISPLAY") != "" {
			caps = append(caps, node.ActionScreenRecord)
		}
		if _, err := os.Stat("/dev/video0"); err == nil && ffmpeg {
			caps = append(caps, node.ActionCameraSnap, node.ActionCameraClip)
		}
	case "darwin":
		if _, err := exec.LookPath("osascript"); err == nil {
			caps = append(caps, node.ActionNotify)
		}
		if ffmpeg {
			caps = append(caps, node.ActionScreenRecord, node.ActionCameraSnap, node.ActionCameraClip)
		}
	}
	return caps
}

// Handle does what inv asks, within the node's capabilities.
func (n *Node) Handle(ctx context.Context, inv node.Invoke) node.Result {
	if !slices.Contains(n.cfg.Capabilities, inv.Action) {
		return unsupported(fmt.Sprintf("%s is not supported on this node (%s/%s); it offers %s", inv.Action, runtime.GOOS, runtime.GOARCH,
			strings.Join(n.cfg.Capabilities, ", ")))
	}
	timeout := time.Duration(inv.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = node.DefaultInvokeTimeout
	}
	switch inv.Action {
	case node.ActionRun:
		var p node.RunParams
		if err := json.Unmarshal(inv.Params, &p); err != nil || len(p.Command) == 0 {
			return failed(node.CodeBadRequest, "run needs a command (argv array)")
		}
		return n.run(ctx, p, timeout)
	case node.ActionNotify:
		var p node.NotifyParams
		if err := json.Unmarshal(inv.Params, &p); err != nil {
			return failed(node.CodeBadRequest, "notify needs a title and a body")
		}
		return n.notify(ctx, p)
	case node.ActionScreenRecord, node.ActionCameraClip, node.ActionCameraSnap:
		var p node.MediaParams
		if len(inv.Params) > 0 && string(inv.Params) != "null" {
			if err := json.Unmarshal(inv.Params, &p); err != nil {
				return failed(node.CodeBadRequest, "bad capture parameters: "+err.Error())
			}
		}
		return n.capture(ctx, inv.Action, p)
	}
	return unsupported(inv.Action + " is not supported on this node")
}

func unsupported(msg string) node.Result { return node.Result{Code: node.CodeUnsupported, Error: msg} }

func failed(code, msg string) node.Result { return node.Result{Code: code, Error: msg} }

// run runs a command the allowlist permits or the device's user approves.
func (n *Node) run(ctx context.Context, p node.RunParams, timeout time.Duration) node.Result {
	shown := showCommand(p)
	allowed, err := n.allowed(p.Command)
	if err != nil {
		return failed(node.CodeFailed, err.Error())
	}
	if !allowed {
		if n.cfg.Prompt == nil {
			return failed(node.CodeDenied, "the command is not in the node's allowlist, and the node asks no one")
		}
		wait := max(timeout-promptMargin, time.Second)
		pctx, cancel := context.WithTimeout(ctx, wait)
		ok, err := n.cfg.Prompt.Ask(pctx, "An agent asks to run on this machine:\n  "+shown+"\nAllow? [y/N] ")
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return failed(node.CodeDenied, fmt.Sprintf("the node's user did not answer within %s", wait.Round(time.Second)))
		case err != nil:
			return failed(node.CodeDenied, "the node could not ask its user: "+err.Error())
		case !ok:
			return failed(node.CodeDenied, "the node's user denied the command")
		}
	}
	if p.NeedsScreenRecording && runtime.GOOS == "linux" && n.cfg.Env("DISPLAY") == "" {
		return failed(node.CodeUnsupported, "the command needs screen recording, and this node has no display")
	}
	limit := time.Duration(p.CommandTimeoutMS) * time.Millisecond
	if limit <= 0 {
		limit = defaultCommandTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(cctx, p.Command[0], p.Command[1:]...)
	cmd.Dir = p.Cwd
	cmd.Env = append(os.Environ(), p.Env...)
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	n.log.Info("Running a command", "command", shown)
	err = cmd.Run()
	code := cmd.ProcessState.ExitCode()
	switch {
	case cctx.Err() == context.DeadlineExceeded:
		return node.Result{Code: node.CodeFailed, Error: fmt.Sprintf("the command ran past its %s limit and was killed", limit),
			Stdout: stdout.String(), Stderr: stderr.String()}
	case err != nil && cmd.ProcessState == nil:
		return failed(node.CodeFailed, fmt.Sprintf("failed to start %q: %v", p.Command[0], err))
	}
	return node.Result{ExitCode: &code, Stdout: stdout.String(), Stderr: stderr.String()}
}

func showCommand(p node.RunParams) string {
	parts := make([]string, 0, len(p.Env)+len(p.Command))
	parts = append(parts, p.Env...)
	for _, a := range p.Command {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	s := strings.Join(parts, " ")
	if p.Cwd != "" {
		s += "   (in " + p.Cwd + ")"
	}
	return s
}

// capped keeps the first maxOutput bytes written to it.
type capped struct {
	buf       bytes.Buffer
	truncated bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		c.truncated = true
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) String() string {
	if c.truncated {
		return c.buf.String() + "\n[output truncated]"
	}
	return c.buf.String()
}

// notify shows a desktop notification.
func (n *Node) notify(ctx context.Context, p node.NotifyParams) node.Result {
	title := p.Title
	if title == "" {
		title = "PicoBot"
	}
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	switch runtime.GOOS {
	case "linux":
		id, err := notifyDBus(ctx, n.cfg.Env("DBUS_SESSION_BUS_ADDRESS"), title, p.Body)
		if err != nil {
			return failed(node.CodeFailed, err.Error())
		}
		return node.Result{Text: fmt.Sprintf("Notification %d shown.", id)}
	case "darwin":
		// The text travels as arguments, never as script source.
		cmd := exec.CommandContext(ctx, "osascript", "-e", "on run argv", "-e",
			"display notification (item 2 of argv) with title (item 1 of argv)", "-e", "end run", title, p.Body)
		if out, err := cmd.CombinedOutput(); err != nil {
			return failed(node.CodeFailed, fmt.Sprintf("osascript failed: %v: %s", err, strings.TrimSpace(string(out))))
		}
		return node.Result{Text: "Notification shown."}
	}
	return unsupported("notify is not supported on " + runtime.GOOS)
}

// notifyDBus calls org.freedesktop.Notifications.Notify on the session bus
// at addr.
func notifyDBus(ctx context.Context, addr, title, body string) (uint32, error) {
	if addr == "" {
		return 0, errors.New("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)")
	}
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("failed to connect to the D-Bus session bus: %w", err)
	}
	defer func() { _ = conn.Close() }()
	obj := conn.Object("org.freedesktop.Notifications", "/org/freedesktop/Notifications")
	var id uint32
	call := obj.CallWithContext(ctx, "org.freedesktop.Notifications.Notify", 0,
		"PicoBot", uint32(0), "", title, body, []string{}, map[string]dbus.Variant{}, int32(-1))
	if call.Err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("failed to show the notification: the notification daemon did not answer within %s: %w", notifyTimeout, call.Err)
		}
		return 0, fmt.Errorf("failed to show the notification (is a notification daemon running?): %w", call.Err)
	}
	if err := call.Store(&id); err != nil {
		return 0, fmt.Errorf("failed to read the notification's id: %w", err)
	}
	return id, nil
}

// capture records the screen or the camera with ffmpeg: a PNG still for
// camera_snap, an mp4 for camera_clip and screen_record.
func (n *Node) capture(ctx context.Context, action string, p node.MediaParams) node.Result {
	dur := time.Duration(p.DurationMS) * time.Millisecond
	if dur <= 0 {
		dur = 3 * time.Second
	}
	dur = min(dur, time.Minute)
	dir, err := os.MkdirTemp("", "picobot-node-")
	if err != nil {
		return failed(node.CodeFailed, err.Error())
	}
	defer func() { _ = os.RemoveAll(dir) }()
	var input []string
	switch {
	case runtime.GOOS == "linux" && action == node.ActionScreenRecord:
		input = []string{"-f", "x11grab", "-framerate", "10", "-i", n.cfg.Env("DISPLAY")}
	case runtime.GOOS == "linux":
		input = []string{"-f", "v4l2", "-i", "/dev/video0"}
	case runtime.GOOS == "darwin" && action == node.ActionScreenRecord:
		input = []string{"-f", "avfoundation", "-framerate", "10", "-capture_cursor", "1", "-i", "Capture screen 0:none"}
	case runtime.GOOS == "darwin":
		input = []string{"-f", "avfoundation", "-framerate", "30", "-i", "0:none"}
	default:
		return unsupported(action + " is not supported on " + runtime.GOOS)
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	name, mediaType := fmt.Sprintf("%s-%s.mp4", strings.ReplaceAll(action, "_", "-"), stamp), "video/mp4"
	out := []string{"-t", fmt.Sprintf("%.3f", dur.Seconds()), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-movflags", "+faststart"}
	if action == node.ActionCameraSnap {
		name, mediaType = fmt.Sprintf("camera-snap-%s.png", stamp), "image/png"
		out = []string{"-frames:v", "1"}
	}
	path := filepath.Join(dir, name)
	args := append(append(append([]string{"-hide_banner", "-loglevel", "error", "-y"}, input...), out...), path)
	cctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ffmpeg", args...)
	cmd.Env = os.Environ()
	var stderr capped
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return failed(node.CodeFailed, fmt.Sprintf("ffmpeg failed: %v: %s", err, strings.TrimSpace(stderr.String())))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return failed(node.CodeFailed, err.Error())
	}
	if len(data) > node.MaxMediaBytes {
		return failed(node.CodeFailed, fmt.Sprintf("the capture is %d bytes, more than %d", len(data), node.MaxMediaBytes))
	}
	return node.Result{Text: fmt.Sprintf("Captured %s (%d KiB).", name, len(data)>>10),
		Media: []node.Media{{Name: name, MediaType: mediaType, Data: data}}}
}
