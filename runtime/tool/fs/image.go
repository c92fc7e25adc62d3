package fs

import (
	"bytes"
	"fmt"
	"image"
	_ "image/gif"  // image.DecodeConfig of GIF files
	_ "image/jpeg" // image.DecodeConfig of JPEG files
	_ "image/png"  // image.DecodeConfig of PNG files
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// maxReadImage bounds an image file file_read hands on: the agent loop
// applies its own, smaller, limit before an image reaches the model.
const maxReadImage = 20 << 20

// ImageType returns the media type of data when it is an image the model
// APIs take inline (PNG, JPEG, GIF, WebP), judged by its bytes, not a name.
func ImageType(data []byte) (string, bool) {
	switch mt := http.DetectContentType(data); mt {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return mt, true
	}
	return "", false
}

// Describe is a one-line description of an image for the model: its type,
// size and, where the standard library can read them, its dimensions.
func Describe(name, mediaType string, data []byte) string {
	s := fmt.Sprintf("%s: %s, %d bytes", name, mediaType, len(data))
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(data)); err == nil {
		s += fmt.Sprintf(", %dx%d pixels", cfg.Width, cfg.Height)
	}
	return s
}

// ReadImage reads the image file p (relative to the workspace) with the
// same confinement as the file tools, up to maxBytes. ok is false when the
// file cannot be read, is no image or is too large; res then says why, for
// the model.
func ReadImage(env tool.Env, p string, maxBytes int64, opts ...Option) (data []byte, mediaType string, res tool.Result, ok bool) {
	pl, res, ok := newPaths(opts).locate(env, p, p, false)
	if !ok {
		return nil, "", res, false
	}
	defer pl.Close()
	return readImage(pl, p, maxBytes)
}

func readImage(pl place, shown string, maxBytes int64) ([]byte, string, tool.Result, bool) {
	if res, ok := regularFile(pl, shown); !ok {
		return nil, "", res, false
	}
	f, err := pl.root.Open(pl.rel)
	if err != nil {
		if res, ok := openError(err, shown); ok {
			return nil, "", res, false
		}
		return nil, "", tool.Errorf("error: cannot open %s: %v", shown, err), false
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, "", tool.Errorf("error: cannot read %s: %v", shown, err), false
	}
	mt, isImage := ImageType(data)
	switch {
	case !isImage:
		return nil, "", tool.Errorf("error: %s is not a PNG, JPEG, GIF or WebP image.", shown), false
	case int64(len(data)) > maxBytes:
		return nil, "", tool.Errorf("error: %s is larger than %d bytes (%.1f MB), the limit for images.", shown, maxBytes, float64(maxBytes)/(1<<20)), false
	}
	return data, mt, tool.Result{}, true
}

// imageResult is file_read's answer for an image file: a line describing
// it, and the image itself as an artifact the agent loop shows the model
// (and does not attach to the reply).
func imageResult(pl place, shown string) tool.Result {
	data, mt, res, ok := readImage(pl, shown, maxReadImage)
	if !ok {
		return res
	}
	name := filepath.Base(shown)
	return tool.Result{
		Content:   "Image " + Describe(strings.TrimSpace(shown), mt, data) + ". It is attached for you to look at.",
		Artifacts: []tool.Artifact{{Name: name, MediaType: mt, Data: data}},
	}
}
