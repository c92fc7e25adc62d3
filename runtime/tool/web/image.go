package web

import (
	"context"
	"fmt"
	"net/http"

	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/tool"
)

// Image is a picture fetched from the web.
type Image struct {
	URL       string
	MediaType string
	Data      []byte
}

// FetchImage downloads the image at rawURL for toolName with web_fetch's
// rules: the guard's address checks, no redirect followed (the new URL is
// reported), web_fetch's timeout, and at most maxBytes. The media type is
// judged by the bytes (PNG, JPEG, GIF, WebP), not the server's header. ok is
// false when there is no image; res then says why, for the model.
func FetchImage(ctx context.Context, guard *netguard.Guard, toolName, rawURL string, maxBytes int64, userAgent string) (img Image, res tool.Result, ok bool) {
	u, err := guard.CheckURL(rawURL)
	if err != nil {
		return Image{}, tool.Errorf("error: %v. %s only reaches public http(s) URLs.", err, toolName), false
	}
	target := u.String()
	reqCtx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, target, nil)
	if err != nil {
		return Image{}, tool.Errorf("error: failed to build request for %s: %v", target, err), false
	}
	if userAgent == "" {
		userAgent = DefaultUserAgent
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "image/png,image/jpeg,image/gif,image/webp;q=0.9,*/*;q=0.5")
	resp, err := guard.Client(fetchTimeout).Do(req)
	if err != nil {
		return Image{}, requestError(ctx, toolName, target, fetchTimeout, err), false
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return Image{}, tool.Errorf("error: %s answered HTTP %s.\n%s", target, resp.Status, redirectNote(guard, toolName, u, resp)), false
	case resp.StatusCode != http.StatusOK:
		return Image{}, tool.Errorf("error: %s answered HTTP %s, not an image.", target, resp.Status), false
	}
	if resp.ContentLength > maxBytes {
		return Image{}, tooLarge(target, resp.ContentLength, maxBytes), false
	}
	data, more, err := readLimited(resp.Body, maxBytes)
	if err != nil {
		return Image{}, requestError(ctx, toolName, target, fetchTimeout, fmt.Errorf("failed to read image: %w", err)), false
	}
	if more {
		return Image{}, tooLarge(target, -1, maxBytes), false
	}
	mt := http.DetectContentType(data)
	switch mt {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
	default:
		return Image{}, tool.Errorf("error: %s returned %s content (declared %q), not a PNG, JPEG, GIF or WebP image.", target, mt, resp.Header.Get("Content-Type")), false
	}
	return Image{URL: target, MediaType: mt, Data: data}, tool.Result{}, true
}

func tooLarge(target string, size, maxBytes int64) tool.Result {
	if size > 0 {
		return tool.Errorf("error: the image at %s is %d bytes, larger than the %d-byte (%.1f MB) limit; pass a larger maxBytesMb if that is intended.", target, size, maxBytes, float64(maxBytes)/(1<<20))
	}
	return tool.Errorf("error: the image at %s is larger than the %d-byte (%.1f MB) limit; pass a larger maxBytesMb if that is intended.", target, maxBytes, float64(maxBytes)/(1<<20))
}
