package messaging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/picobot/picobot/runtime/channel"
	"github.com/picobot/picobot/runtime/outbound"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/tool"
)

// maxFiles bounds the attachments of one message.
const maxFiles = 10

// SendArgs are the arguments of send_message.
type SendArgs struct {
	TargetChatID string   `json:"target_chat_id" jsonschema:"<channel>:<chat_id>[:<dialog_id>]: a platform's chat (telegram:123456789, telegram:123456789:d_k3x9qa2m) or your own web/terminal chat that a user wrote in (web:px-art, which is web:<your name>/px-art)"`
	Content      string   `json:"content" jsonschema:"message text"`
	Files        []string `json:"files,omitempty" jsonschema:"file paths, absolute or relative to the workspace"`
	Origin       string   `json:"origin,omitempty" jsonschema:"source label; default: this session"`
}

const sendDescription = "Send a message, optionally with files, to a chat and wait for the real delivery result. " +
	"Targeting this conversation attaches the files to your reply. chat_manager list_channels shows targets."

// NewSendMessage returns send_message for one agent.
func NewSendMessage(cfg toolConfig) tool.Tool {
	return tool.New("send_message", sendDescription, cfg.send, tool.Exclusive(),
		tool.Adjust(func(s *jsonschema.Schema) {
			if p := s.Properties["files"]; p != nil {
				n := maxFiles
				p.MaxItems = &n
			}
		}))
}

func (c toolConfig) send(ctx context.Context, env tool.Env, a SendArgs) (tool.Result, error) {
	return c.sendWith(ctx, env, a, false)
}

// sendWith is send; withIDs adds the platform's ids of the sent messages to
// the result, which message's edit, delete, pin and react take.
func (c toolConfig) sendWith(ctx context.Context, env tool.Env, a SendArgs, withIDs bool) (tool.Result, error) {
	agent := env.Agent
	if agent == "" {
		agent = c.agent
	}
	t, err := c.resolveTarget(ctx, agent, a.TargetChatID)
	if err != nil {
		return tool.Errorf("error: %v. Nothing was sent. %s", err, targetForms(agent)), nil
	}
	target := t.Target
	files := make([]channel.File, 0, len(a.Files))
	for _, p := range a.Files {
		f, err := c.loadFile(ctx, env, p)
		if err != nil {
			return tool.Errorf("error: %v. Nothing was sent.", err), nil
		}
		files = append(files, f)
	}

	if cur, err := session.ParseID(env.SessionID); err == nil && isCurrent(cur, target) {
		if len(files) == 0 {
			return tool.Text("Nothing sent: " + a.TargetChatID + " is this conversation, and your reply reaches it directly. Put the text in your reply."), nil
		}
		arts := make([]tool.Artifact, len(files))
		names := make([]string, len(files))
		for i, f := range files {
			arts[i] = tool.Artifact{Name: f.Name, MediaType: f.MediaType, Data: f.Data, PresentToUser: true}
			names[i] = f.Name
		}
		return tool.Result{Content: fmt.Sprintf("Attached %s to your reply in this conversation. Write the message itself in your reply.",
			strings.Join(names, ", ")), Artifacts: arts}, nil
	}

	if t.noPush != "" {
		return tool.Errorf("error: %v %q: %s. Nothing was sent. %s", outbound.ErrBadTarget, a.TargetChatID, t.noPush, targetForms(agent)), nil
	}
	if c.opts.Sender == nil {
		return tool.Errorf("error: this runtime cannot deliver to other chats (no outbound dispatcher). Only this conversation can be reached, through your reply."), nil
	}
	if t.client {
		read, err := c.clientWrote(ctx, target)
		if err != nil {
			return tool.Errorf("error: NOT sent to %s: %v", target, err), nil
		}
		if !read {
			return tool.Errorf("error: NOT sent to %s: no user has written in this chat, so nobody is known to read it "+
				"(nothing was stored). chat_manager list_channels shows your chats; this conversation you reach with your reply.", target), nil
		}
	}
	origin := a.Origin
	if origin == "" {
		origin = env.SessionID
	}
	res, err := c.opts.Sender.Deliver(ctx, outbound.Message{Agent: agent, Target: target.String(), Text: a.Content, Files: files, Origin: origin})
	var de *outbound.DeliveryError
	switch {
	case err == nil && t.client:
		return tool.Text(fmt.Sprintf("Delivered to %s (session %s, %d attempt(s)): stored in the chat's history, "+
			"which its client shows when it loads the chat.", target, res.SessionID, res.Attempts)), nil
	case err == nil && withIDs && len(res.Receipt.MessageIDs) > 0:
		return tool.Text(fmt.Sprintf("Delivered to %s (session %s, %d attempt(s)); messageId: %s.", target, res.SessionID, res.Attempts,
			strings.Join(res.Receipt.MessageIDs, ", "))), nil
	case err == nil:
		return tool.Text(fmt.Sprintf("Delivered to %s (session %s, %d attempt(s)).", target, res.SessionID, res.Attempts)), nil
	case errors.Is(err, outbound.ErrUnknownChannel):
		return tool.Errorf("error: %v. chat_manager list_channels shows the channels you can send to.", err), nil
	case errors.Is(err, outbound.ErrBadTarget):
		return tool.Errorf("error: %v", err), nil
	case errors.As(err, &de):
		return tool.Errorf("error: NOT delivered to %s: failed after %d attempt(s): %v", target, de.Result.Attempts, de.Err), nil
	case ctx.Err() != nil:
		return tool.Result{}, err
	}
	return tool.Errorf("error: NOT delivered to %s: %v", target, err), nil
}

// isCurrent reports whether target is the session the call runs in.
func isCurrent(cur session.ID, t outbound.Target) bool {
	return t.Channel == cur.Channel && t.ChatID == cur.ChatID && (t.DialogID == "" || t.DialogID == cur.DialogID)
}

// loadFile reads an attachment from the workspace (or an extra root),
// refusing paths that leave them, also through symlinks.
func (c toolConfig) loadFile(ctx context.Context, env tool.Env, p string) (channel.File, error) {
	if strings.TrimSpace(p) == "" {
		return channel.File{}, errors.New("empty file path")
	}
	if env.Workspace == "" && !filepath.IsAbs(p) {
		return channel.File{}, fmt.Errorf("file %q: relative paths need a workspace, and this session has none", p)
	}
	if c.opts.Files != nil {
		return c.readFile(ctx, env, p)
	}
	abs := env.Resolve(p)
	resolved, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return channel.File{}, fmt.Errorf("file %q does not exist", p)
	}
	if err != nil {
		return channel.File{}, fmt.Errorf("file %q cannot be read: %w", p, err)
	}
	roots := append([]string{env.Workspace}, c.opts.ExtraRoots...)
	inside := false
	for _, r := range roots {
		if r != "" && within(r, resolved) {
			inside = true
			break
		}
	}
	if !inside {
		return channel.File{}, fmt.Errorf("file %q is outside the workspace (%s); copy it there first", p, env.Workspace)
	}
	st, err := os.Stat(resolved)
	if err != nil {
		return channel.File{}, fmt.Errorf("file %q cannot be read: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return channel.File{}, fmt.Errorf("%q is not a regular file", p)
	}
	if st.Size() > c.opts.MaxFileBytes {
		return channel.File{}, fmt.Errorf("file %q has %d bytes, more than the %d byte limit", p, st.Size(), c.opts.MaxFileBytes)
	}
	if st.Size() == 0 {
		return channel.File{}, fmt.Errorf("file %q is empty", p)
	}
	fh, err := os.Open(resolved)
	if err != nil {
		return channel.File{}, fmt.Errorf("file %q cannot be read: %w", p, err)
	}
	defer func() { _ = fh.Close() }()
	data, err := io.ReadAll(io.LimitReader(fh, c.opts.MaxFileBytes+1))
	if err != nil {
		return channel.File{}, fmt.Errorf("file %q cannot be read: %w", p, err)
	}
	return channel.File{Name: filepath.Base(abs), MediaType: mediaType(abs, data), Size: int64(len(data)), Data: data}, nil
}

// readFile reads an attachment with c.opts.Files, which confines it to the
// workspace as the file tools are.
func (c toolConfig) readFile(ctx context.Context, env tool.Env, p string) (channel.File, error) {
	data, err := c.opts.Files.ReadFile(ctx, env, p, c.opts.MaxFileBytes)
	switch {
	case err != nil:
		return channel.File{}, fmt.Errorf("file %q cannot be attached: %w", p, err)
	case len(data) == 0:
		return channel.File{}, fmt.Errorf("file %q is empty", p)
	}
	abs := env.Resolve(p)
	return channel.File{Name: filepath.Base(abs), MediaType: mediaType(abs, data), Size: int64(len(data)), Data: data}, nil
}

// within reports whether path is root or below it, after resolving root's
// own symlinks.
func within(root, path string) bool {
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// mediaType guesses from the extension, then by sniffing the content.
func mediaType(name string, data []byte) string {
	if t := mime.TypeByExtension(strings.ToLower(filepath.Ext(name))); t != "" {
		return t
	}
	return http.DetectContentType(data)
}
