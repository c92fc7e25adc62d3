package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
)

// TextOnly wraps a model that does not accept images: each image of a
// request becomes a one-line note in its message, so a fallback without
// vision still answers a conversation with screenshots in it.
func TextOnly(p llm.Provider) llm.Provider { return textOnly{p} }

type textOnly struct{ llm.Provider }

func (t textOnly) Complete(ctx context.Context, req llm.Request, onDelta func(llm.Delta)) (*llm.Response, error) {
	var msgs []llm.Message
	for i, m := range req.Messages {
		if len(m.Images) == 0 {
			continue
		}
		if msgs == nil {
			msgs = append([]llm.Message(nil), req.Messages...)
		}
		var notes []string
		for _, img := range m.Images {
			notes = append(notes, fmt.Sprintf("[image %s, %d bytes, not shown: this model does not accept images]", img.MediaType, len(img.Data)))
		}
		text := strings.Join(notes, "\n")
		if m.Content != "" {
			text = m.Content + "\n" + text
		}
		msgs[i].Content, msgs[i].Images = text, nil
	}
	if msgs != nil {
		req.Messages = msgs
	}
	return t.Provider.Complete(ctx, req, onDelta)
}
