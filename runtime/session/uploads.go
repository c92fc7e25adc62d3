package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/turn"
)

// UploadsDir is the folder of a session's workspace that receives the files
// the user attaches to messages, so the agent's tools can read them.
const UploadsDir = "uploads"

// MaxUploadBytes bounds one file a user attaches (the gateway refuses
// larger uploads first; this guards a message that names a bigger artifact).
const MaxUploadBytes = 10 << 20

// Upload is a file the user attached to a message: an artifact of the
// tenant, uploaded before the message was sent, referenced by id.
type Upload struct {
	ID, Name, MediaType string
}

// uploadedFiles is what a turn's uploads became: the lines the stored user
// message gets (a link to each file and where it is in the workspace), and
// the images to show the model with the message this turn.
type uploadedFiles struct {
	lines  string
	images []tool.Artifact
}

// receiveUploads reads the message's files from the artifact store, copies
// each into the session's workspace (UploadsDir) and returns the lines that
// tell the user and the model about them. A file that cannot be read or
// copied gets a note instead of failing the turn: the gateway checked the
// ids when the message was sent.
func (m *Manager) receiveUploads(ctx context.Context, id ID, ups []Upload) uploadedFiles {
	var out uploadedFiles
	var lines []string
	ws := m.cfg.Workspace(id)
	for _, u := range ups {
		name := cleanUploadName(u.Name)
		data, a, err := m.readUpload(ctx, u.ID)
		if err != nil {
			lines = append(lines, fmt.Sprintf("(%s could not be read: %v)", name, err))
			continue
		}
		if a.Name != "" {
			name = cleanUploadName(a.Name)
		}
		mt := a.MediaType
		if mt == "" {
			mt = u.MediaType
		}
		ref := turn.Attachment{ID: a.ID, Name: name, MediaType: mt}
		if m.cfg.ArtifactURL != nil {
			ref.URL = m.cfg.ArtifactURL(a)
		}
		line := ref.Markdown()
		switch rel, err := saveUpload(ws, name, data); {
		case err != nil:
			line += fmt.Sprintf(" (not copied to the workspace: %v)", err)
		default:
			line += " (in the workspace: " + rel + ")"
		}
		lines = append(lines, line)
		if ref.Image() {
			out.images = append(out.images, tool.Artifact{Name: name, MediaType: mt, Data: data})
		}
	}
	out.lines = strings.Join(lines, "\n")
	return out
}

// readUpload returns an upload's bytes, refusing one over MaxUploadBytes.
func (m *Manager) readUpload(ctx context.Context, id string) ([]byte, store.Artifact, error) {
	if m.cfg.Artifacts == nil {
		return nil, store.Artifact{}, errors.New("this runtime has no artifact store")
	}
	rc, a, err := m.cfg.Artifacts.Open(ctx, id)
	if err != nil {
		return nil, store.Artifact{}, err
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, MaxUploadBytes+1))
	if err != nil {
		return nil, store.Artifact{}, fmt.Errorf("failed to read upload %q: %w", id, err)
	}
	if len(data) > MaxUploadBytes {
		return nil, store.Artifact{}, fmt.Errorf("it is larger than %d bytes", MaxUploadBytes)
	}
	return data, a, nil
}

// cleanUploadName is a file name safe in a folder and on one line of
// markdown.
func cleanUploadName(name string) string {
	name = path.Base(strings.ReplaceAll(strings.TrimSpace(name), "\\", "/"))
	name = strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f:
			return -1
		case strings.ContainsRune("[]()<>", r):
			return '_'
		}
		return r
	}, name)
	if name == "" || name == "." || name == "/" || name == ".." {
		return "file"
	}
	return name
}

// saveUpload writes data into ws/UploadsDir under name, or under name-2,
// name-3, ... when another file has that name; the same bytes sent again
// (a message delivered twice) reuse their file. It returns the path
// relative to the workspace.
func saveUpload(ws, name string, data []byte) (string, error) {
	if ws == "" {
		return "", errors.New("this runtime has no workspace")
	}
	dir := filepath.Join(ws, UploadsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("failed to create folder %q: %w", UploadsDir, err)
	}
	ext := path.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for n := 1; n < 1000; n++ {
		candidate := name
		if n > 1 {
			candidate = stem + "-" + strconv.Itoa(n) + ext
		}
		p := filepath.Join(dir, candidate)
		old, err := os.ReadFile(p)
		switch {
		case err == nil && bytes.Equal(old, data):
			return path.Join(UploadsDir, candidate), nil
		case err == nil:
			continue
		case !errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("failed to read %q: %w", candidate, err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return "", fmt.Errorf("failed to write %q: %w", candidate, err)
		}
		return path.Join(UploadsDir, candidate), nil
	}
	return "", fmt.Errorf("too many files named %q", name)
}

// withUploadImages returns history with the turn's uploaded images on the
// user message whose stored text is text (the last such one), or with
// notes when the model cannot be shown them (agent.Images.Attach). history
// may be the cache's: it is copied when changed.
func (m *Manager) withUploadImages(g *Generation, history []llm.Message, text string, images []tool.Artifact) []llm.Message {
	if len(images) == 0 || g.Loop == nil {
		return history
	}
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role != llm.RoleUser || history[i].Content != text {
			continue
		}
		out := slices.Clone(history)
		msg := out[i]
		msg.Images = slices.Clone(msg.Images)
		g.Loop.Images.Attach(&msg, images)
		out[i] = msg
		return out
	}
	return history
}

// uploadLine matches a line receiveUploads writes: a file's link and where
// it is, or a note on one that could not be read.
var uploadLine = regexp.MustCompile(`^(?:!?\[([^\]\n]*)\]\([^)\s]+\)(?: \(.*\))?|\(.* could not be read: .*\))$`)

// titleText is what a title is made of for a stored user message: the
// text the user typed, or the names of the files they sent without text.
func titleText(content string) string {
	lines := strings.Split(content, "\n")
	var names []string
	i := len(lines)
	for ; i > 0; i-- {
		m := uploadLine.FindStringSubmatch(lines[i-1])
		if m == nil {
			break
		}
		if m[1] != "" {
			names = append([]string{m[1]}, names...)
		}
	}
	if len(names) == 0 || i > 0 && lines[i-1] != "" {
		return content
	}
	if text := strings.TrimSpace(strings.Join(lines[:max(0, i-1)], "\n")); text != "" {
		return text
	}
	return strings.Join(names, ", ")
}
