// Package imagetool is the image tool: it asks a model that can see images
// (the Agent's spec.model.imageModel, or its own model when that accepts
// images) about a picture in the workspace or on the web, and returns the
// answer as text. The agent's main model need not accept images itself.
package imagetool

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
	"github.com/picobot/picobot/runtime/tool/web"
)

const (
	// Name is the tool's name.
	Name = "image"
	// DefaultPrompt is the question asked when the model passes none (the
	// reference's default).
	DefaultPrompt = "描述圖像。"
	// DefaultMaxBytesMb is the largest image read when maxBytesMb is not
	// given: 5 MB, what the Anthropic API accepts per image.
	DefaultMaxBytesMb = 5
	// MaxBytesMb is the largest maxBytesMb accepted.
	MaxBytesMb = 20
	// defaultTimeout bounds the image model's answer.
	defaultTimeout = 2 * time.Minute
	// maxAnswerTokens caps the image model's answer.
	maxAnswerTokens = 2048
)

// Config of the tool.
type Config struct {
	// Provider is the image model, with its fallbacks.
	Provider llm.Provider
	// Model names the image model ("provider/model") in results.
	Model string
	// Guard checks image URLs as web_fetch's guard does; a default guard
	// when nil.
	Guard *netguard.Guard
	// FS confines workspace paths as the file tools' options do.
	FS []fs.Option
	// FileRead, when set, is the file_read tool workspace images are read
	// with instead (in cluster mode the sandbox container's, so the
	// runtime never opens a path the model chose).
	FileRead tool.Tool
	// Timeout bounds one answer (2 minutes when zero).
	Timeout time.Duration
}

// Args are the arguments of image.
type Args struct {
	Image      string  `json:"image" jsonschema:"Workspace path or http(s) URL of a PNG, JPEG, GIF or WebP image"`
	Prompt     string  `json:"prompt,omitempty" jsonschema:"What to ask about the image (default: 描述圖像。)"`
	Model      string  `json:"model,omitempty" jsonschema:"Model to ask instead of the configured image model, at the same endpoint"`
	MaxBytesMb float64 `json:"maxBytesMb,omitempty" jsonschema:"Refuse images larger than this many MB (default 5, at most 20)"`
}

// New returns the image tool. It is built only for an agent that has a
// model able to see images; an agent without one is not offered the tool.
func New(cfg Config) tool.Tool {
	if cfg.Guard == nil {
		cfg.Guard = netguard.New()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	r := &runner{cfg: cfg}
	return tool.New(Name,
		"Ask an image model about an image (a workspace path or an http(s) URL) and get its answer as text.",
		r.run,
		tool.ReadOnly(),
		tool.Range("maxBytesMb", tool.Bound(0.001), tool.Bound(MaxBytesMb)),
	)
}

type runner struct {
	cfg Config
}

func (r *runner) run(ctx context.Context, env tool.Env, a Args) (tool.Result, error) {
	src := strings.TrimSpace(a.Image)
	if src == "" {
		return tool.Errorf("error: image is empty. Pass a workspace path or an http(s) URL of the image."), nil
	}
	if math.IsNaN(a.MaxBytesMb) || a.MaxBytesMb < 0 || a.MaxBytesMb > MaxBytesMb {
		return tool.Errorf("error: maxBytesMb must be between 0.001 and %d.", MaxBytesMb), nil
	}
	mb := a.MaxBytesMb
	if mb == 0 {
		mb = DefaultMaxBytesMb
	}
	maxBytes := int64(mb * (1 << 20))
	prompt := strings.TrimSpace(a.Prompt)
	if prompt == "" {
		prompt = DefaultPrompt
	}

	img, name, res, ok := r.load(ctx, env, src, maxBytes)
	if !ok {
		return res, nil
	}
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	resp, err := r.cfg.Provider.Complete(callCtx, llm.Request{
		Model:     strings.TrimSpace(a.Model),
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: prompt, Images: []llm.Image{img}}},
		MaxTokens: maxAnswerTokens,
	}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return tool.Errorf("error: image was cancelled: %v", ctx.Err()), nil
		}
		model := r.cfg.Model
		if a.Model != "" {
			model = a.Model
		}
		return tool.Errorf("error: the image model %s did not answer: %v", model, err), nil
	}
	answer := strings.TrimSpace(resp.Message.Content)
	if answer == "" {
		answer = "(the image model gave no answer)"
	}
	by := resp.Model
	if by == "" {
		by = r.cfg.Model
	}
	// The answer describes what the image shows, text in it included: a
	// picture can carry instructions as well as a page can.
	return tool.Text(fmt.Sprintf("%s\n\n[%s; answered by %s]", web.WrapUntrusted(name, answer), fs.Describe(name, img.MediaType, img.Data), by)), nil
}

// load reads the image from a URL or the workspace, refusing one larger
// than maxBytes.
func (r *runner) load(ctx context.Context, env tool.Env, src string, maxBytes int64) (llm.Image, string, tool.Result, bool) {
	if u, err := url.Parse(src); err == nil && u.Scheme != "" && len(u.Scheme) > 1 {
		if u.Scheme != "http" && u.Scheme != "https" {
			return llm.Image{}, "", tool.Errorf("error: image %q has the scheme %q; pass a workspace path or an http(s) URL.", src, u.Scheme), false
		}
		img, res, ok := web.FetchImage(ctx, r.cfg.Guard, Name, src, maxBytes, "")
		if !ok {
			return llm.Image{}, "", res, false
		}
		return llm.Image{MediaType: img.MediaType, Data: img.Data}, img.URL, tool.Result{}, true
	}
	if r.cfg.FileRead != nil {
		return r.readWith(ctx, env, src, maxBytes)
	}
	data, mt, res, ok := fs.ReadImage(env, src, maxBytes, r.cfg.FS...)
	if !ok {
		return llm.Image{}, "", res, false
	}
	return llm.Image{MediaType: mt, Data: data}, filepath.Clean(src), tool.Result{}, true
}

// readWith reads a workspace image with the file_read tool, which returns
// an image file as an artifact.
func (r *runner) readWith(ctx context.Context, env tool.Env, src string, maxBytes int64) (llm.Image, string, tool.Result, bool) {
	raw, err := json.Marshal(fs.ReadArgs{Path: src})
	if err != nil {
		return llm.Image{}, "", tool.Errorf("error: cannot read %s: %v", src, err), false
	}
	res, err := r.cfg.FileRead.Run(ctx, env, raw)
	switch {
	case err != nil:
		return llm.Image{}, "", tool.Errorf("error: cannot read %s: %v", src, err), false
	case res.IsError:
		return llm.Image{}, "", res, false
	}
	for _, a := range res.Artifacts {
		if _, ok := fs.ImageType(a.Data); !ok {
			continue
		}
		if int64(len(a.Data)) > maxBytes {
			return llm.Image{}, "", tool.Errorf("error: %s is larger than %d bytes (%.1f MB), the limit for images.", src, maxBytes, float64(maxBytes)/(1<<20)), false
		}
		return llm.Image{MediaType: a.MediaType, Data: a.Data}, filepath.Clean(src), tool.Result{}, true
	}
	return llm.Image{}, "", tool.Errorf("error: %s is not a PNG, JPEG, GIF or WebP image.", src), false
}
