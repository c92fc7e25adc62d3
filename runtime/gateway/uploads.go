package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/protocol"
	"github.com/picobot/picobot/runtime/store"
)

// Limits of the files clients attach to messages.
const (
	// MaxUploadBytes bounds one uploaded file.
	MaxUploadBytes = 10 << 20
	// MaxUploadImageBytes bounds an image the model is to see: 3.75 MiB,
	// whose base64 is the 5 MiB the Anthropic API takes per image (the
	// agent loop's DefaultMaxImageBytes), so an accepted image is never
	// dropped on the way to the model.
	MaxUploadImageBytes = 3 << 20 * 5 / 4
	// MaxFilesPerMessage bounds the files of one message.
	MaxFilesPerMessage = 10
	maxFileNameBytes   = 200
)

// modelImages are the image types the model APIs take inline: an upload
// that says it is one must be one.
var modelImages = map[string]string{"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}

// Upload is a file a client uploads to attach it to a message.
type Upload struct {
	Name      string
	MediaType string
	Data      []byte
}

// upload stores the request body as a file of the chat (agent, chat_id,
// the file's name and media_type in the query; the body sent as
// application/octet-stream, see browserSafe) and answers with its
// reference; a send frame names it in files.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	chat := Chat{Channel: ChannelWeb, Agent: q.Get("agent"), ChatID: q.Get("chat_id")}
	if err := checkChat(chat); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	data, err := io.ReadAll(r.Body) // in memory: guardBody read it within the upload limit
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "failed to read the file: "+err.Error())
		return
	}
	declared := q.Get("media_type")
	if declared == "" {
		declared = r.Header.Get("Content-Type")
	}
	up, code, msg := checkUpload(q.Get("name"), declared, data)
	if code != "" {
		writeError(w, statusOf[code], code, msg)
		return
	}
	a, err := s.backend.Upload(r.Context(), chat, up)
	if err != nil {
		code := errorCode(err, CodeUnknownAgent)
		if code == CodeInternal {
			s.log.Error("Upload failed", "agent", chat.Agent, "name", up.Name, "err", err)
		}
		writeError(w, statusFor(w, err, code), code, protocol.ClientMessage(code, err))
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": a.ID, "name": a.Name, "media_type": a.MediaType, "size": a.Size,
		"url": "/api/v1/artifacts/" + url.PathEscape(a.ID)})
}

// checkUpload validates an uploaded file and settles its media type: the
// declared one (Content-Type) unless it is missing or generic, then the
// one its bytes show. It returns a protocol code and a message saying what
// is wrong, or "" when the file may be stored.
func checkUpload(name, contentType string, data []byte) (Upload, string, string) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return Upload{}, CodeBadRequest, "name is required: the file's name, in the query (?name=report.pdf)"
	case len(name) > maxFileNameBytes || !utf8.ValidString(name) || strings.ContainsAny(name, "/\\\x00\n\r") || name == "." || name == "..":
		return Upload{}, CodeBadRequest, fmt.Sprintf("name %q is not a file name (at most %d bytes, no '/', '\\' or control characters)", truncateName(name), maxFileNameBytes)
	case len(data) == 0:
		return Upload{}, CodeBadRequest, fmt.Sprintf("%s is empty", name)
	case len(data) > MaxUploadBytes:
		return Upload{}, CodeTooLarge, fmt.Sprintf("%s is %s; a file may be at most %s", name, sizeText(len(data)), sizeText(MaxUploadBytes))
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt == "application/octet-stream" || mt == "application/x-www-form-urlencoded" {
		mt = ""
	}
	sniffed, _, _ := mime.ParseMediaType(http.DetectContentType(data))
	if mt == "" {
		mt = sniffed
		if byExt := mime.TypeByExtension(strings.ToLower(path.Ext(name))); byExt != "" && !strings.HasPrefix(byExt, "image/") {
			// Text-like files sniff as text/plain; their extension says more
			// (an image type is only ever taken from the bytes).
			if t, _, err := mime.ParseMediaType(byExt); err == nil && (sniffed == "text/plain" || sniffed == "application/octet-stream") {
				mt = t
			}
		}
	}
	if kind, ok := modelImages[mt]; ok {
		if sniffed != mt {
			return Upload{}, CodeUnsupportedMedia, fmt.Sprintf("%s says it is a %s image (%s) but its bytes are not (they look like %s)", name, kind, mt, sniffed)
		}
		if len(data) > MaxUploadImageBytes {
			return Upload{}, CodeTooLarge, fmt.Sprintf("%s is %s; an image may be at most %s (what the model APIs accept): scale it down or send it as another type",
				name, sizeText(len(data)), sizeText(MaxUploadImageBytes))
		}
	}
	return Upload{Name: name, MediaType: mt, Data: data}, "", ""
}

// sizeText is a byte count for people: "3.75 MiB", "12 KiB", "900 bytes".
func sizeText(n int) string {
	switch {
	case n >= 1<<20:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", float64(n)/(1<<20)), "0"), ".") + " MiB"
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func truncateName(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "…"
	}
	return s
}

// sendFiles resolves the files a send names: each must be a file uploaded
// to this chat by the tenant (Backend.Artifact sees only the tenant's).
func (s *Server) sendFiles(ctx context.Context, chat Chat, ids []string) ([]protocol.File, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if len(ids) > MaxFilesPerMessage {
		return nil, Errorf(CodeBadRequest, "a message may carry at most %d files (it names %d)", MaxFilesPerMessage, len(ids))
	}
	out := make([]protocol.File, 0, len(ids))
	for _, id := range ids {
		if id == "" || len(id) > maxIDBytes {
			return nil, Errorf(CodeBadRequest, "files must be ids of uploads (POST /api/v1/uploads)")
		}
		rc, a, err := s.backend.Artifact(ctx, id)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, Errorf(CodeUnknownArtifact, "no uploaded file %q: upload it first (POST /api/v1/uploads)", id)
			}
			return nil, err
		}
		_ = rc.Close()
		if a.SessionID != UploadScope(chat) {
			return nil, Errorf(CodeUnknownArtifact, "file %q was not uploaded to this chat", id)
		}
		out = append(out, protocol.File{ID: a.ID, Name: a.Name, MediaType: a.MediaType, Size: a.Size})
	}
	return out, nil
}

// UploadScope is the session id uploads of a chat are recorded under (the
// chat without a dialog: a file is sent before the dialog it lands in is
// known).
func UploadScope(c Chat) string { return c.ChannelName() + ":" + c.Key() + ":" + UploadsDialog }

// UploadsDialog is the dialog part of UploadScope, a name no real dialog
// has (dialog ids are "default" or "d_...").
const UploadsDialog = "uploads"

// SaveUpload is Backend.Upload for backends with an artifact store: the
// file becomes an artifact of the chat's uploads.
func SaveUpload(ctx context.Context, saver interface {
	Save(ctx context.Context, sessionID, name, mediaType string, data []byte) (store.Artifact, error)
}, c Chat, up Upload) (store.Artifact, error) {
	return saver.Save(ctx, UploadScope(c), up.Name, up.MediaType, up.Data)
}
