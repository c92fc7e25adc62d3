package agent

import (
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
)

const (
	// DefaultMaxImageBytes bounds one image sent to the model: 3.75 MiB,
	// whose base64 is the 5 MiB the Anthropic API accepts per image
	// (OpenAI accepts more).
	DefaultMaxImageBytes = 3 << 20 * 5 / 4
	// DefaultMaxImagesPerRequest bounds the images of one model request:
	// the newest are sent, older ones give way to a note, so a long
	// session of screenshots does not resend every one of them each step.
	DefaultMaxImagesPerRequest = 8
)

// ImageMediaTypes are the image types both protocols take inline.
var imageMediaTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// IsModelImage reports whether mediaType is an image type the model APIs
// take inline (PNG, JPEG, GIF, WebP).
func IsModelImage(mediaType string) bool {
	mt, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(mediaType)), ";")
	return imageMediaTypes[strings.TrimSpace(mt)]
}

// Images decides what the model sees of the images tools return.
type Images struct {
	// Accept: the model accepts images. Without it each image becomes a
	// one-line note, so the model knows it was there.
	Accept bool
	// MaxBytes bounds one image (DefaultMaxImageBytes when 0); a larger one
	// becomes a note.
	MaxBytes int
	// MaxPerRequest bounds the images of one request
	// (DefaultMaxImagesPerRequest when 0).
	MaxPerRequest int
}

func (im Images) maxBytes() int {
	if im.MaxBytes > 0 {
		return im.MaxBytes
	}
	return DefaultMaxImageBytes
}

func (im Images) maxPerRequest() int {
	if im.MaxPerRequest > 0 {
		return im.MaxPerRequest
	}
	return DefaultMaxImagesPerRequest
}

// Attach puts image artifacts on a message (a tool result's, or the
// images a user attached to their message), or a note for each one the
// model cannot be shown. Artifacts that are no model image are skipped.
func (im Images) Attach(m *llm.Message, artifacts []tool.Artifact) { im.attach(m, artifacts) }

// attach puts the image artifacts of a tool result on its message, or a
// note for each one the model cannot be shown.
func (im Images) attach(m *llm.Message, artifacts []tool.Artifact) {
	var notes []string
	for _, a := range artifacts {
		if !IsModelImage(a.MediaType) {
			continue
		}
		switch {
		case !im.Accept:
			notes = append(notes, fmt.Sprintf("[image %s (%s, %d bytes) not shown: this model does not accept images]", a.Name, a.MediaType, len(a.Data)))
		case len(a.Data) > im.maxBytes():
			notes = append(notes, fmt.Sprintf("[image %s (%s, %d bytes) not shown: larger than the %d-byte limit for images sent to the model]", a.Name, a.MediaType, len(a.Data), im.maxBytes()))
		default:
			m.Images = append(m.Images, llm.Image{MediaType: a.MediaType, Data: a.Data})
		}
	}
	if len(notes) > 0 {
		if m.Content != "" {
			m.Content += "\n"
		}
		m.Content += strings.Join(notes, "\n")
	}
}

// limit returns msgs with at most MaxPerRequest images, the newest; the
// messages that lose theirs get a note instead. msgs is not modified.
func (im Images) limit(msgs []llm.Message) []llm.Message {
	room := im.maxPerRequest()
	if !im.Accept {
		room = 0
	}
	var out []llm.Message
	for i := len(msgs) - 1; i >= 0; i-- {
		n := len(msgs[i].Images)
		if n == 0 {
			continue
		}
		if n <= room {
			room -= n
			continue
		}
		if out == nil {
			out = append([]llm.Message(nil), msgs...)
		}
		m := &out[i]
		dropped := n - room
		m.Images = m.Images[:room:room]
		room = 0
		note := fmt.Sprintf("[%d earlier image(s) omitted from this request]", dropped)
		if m.Content != "" {
			note = m.Content + "\n" + note
		}
		m.Content = note
	}
	if out == nil {
		return msgs
	}
	return out
}
