package channel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// maxAPIResponse caps what is read of a platform API answer.
const maxAPIResponse = 4 << 20

// part is one platform API call of an outbound message; it returns the
// platform's id of what it sent ("" when none).
type part func(ctx context.Context) (string, error)

// sendParts runs parts[from:] in order. A failure becomes a SendError that
// counts the parts this call delivered, so a retry can skip them.
func sendParts(ctx context.Context, channel string, from int, parts []part) (Receipt, error) {
	var r Receipt
	for i := max(from, 0); i < len(parts); i++ {
		id, err := parts[i](ctx)
		if err != nil {
			se := asSendError(channel, err)
			se.Parts = i - max(from, 0)
			return r, se
		}
		if id != "" {
			r.MessageIDs = append(r.MessageIDs, id)
		}
	}
	return r, nil
}

// asSendError classifies err: SendErrors keep their verdict, network
// failures are transient, anything else is permanent.
func asSendError(channel string, err error) *SendError {
	var se *SendError
	if errors.As(err, &se) {
		out := *se
		out.Channel = channel
		return &out
	}
	transient := false
	var ne interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		transient = true
	case errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		transient = true
	}
	return &SendError{Channel: channel, Transient: transient, Err: err}
}

// httpResult is a platform API answer.
type httpResult struct {
	status int
	header http.Header
	body   []byte
}

// do sends req and reads the answer. Network errors come back as transient
// SendErrors without the request URL, which may hold a token (Telegram puts
// the bot token in the path).
func do(hc *http.Client, req *http.Request) (httpResult, error) {
	return doLimit(hc, req, maxAPIResponse)
}

// doLimit is do reading at most limit bytes of the answer.
func doLimit(hc *http.Client, req *http.Request, limit int64) (httpResult, error) {
	res, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if req.Context().Err() != nil {
			return httpResult{}, req.Context().Err()
		}
		return httpResult{}, &SendError{Transient: true, Err: fmt.Errorf("request to %s failed: %w", req.URL.Host, err)}
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(res.Body, limit))
	if err != nil {
		return httpResult{}, &SendError{Transient: true, Err: fmt.Errorf("failed to read answer of %s: %w", req.URL.Host, err)}
	}
	return httpResult{status: res.StatusCode, header: res.Header, body: body}, nil
}

// statusError turns an HTTP failure status into a SendError: 408, 429 and
// 5xx are transient (429 and 503 with the Retry-After the server sent).
func statusError(status int, header http.Header, code, msg string) *SendError {
	se := &SendError{Code: code, Err: fmt.Errorf("HTTP %d: %s", status, msg)}
	if status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500 {
		se.Transient = true
		se.RetryAfter = parseRetryAfter(header.Get("Retry-After"), time.Now())
	}
	return se
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// formFile is one file field of a multipart request.
type formFile struct {
	field string
	file  File
}

// multipartBody encodes fields and one file as multipart/form-data.
func multipartBody(fields [][2]string, ff *formFile) (*bytes.Buffer, string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := w.WriteField(f[0], f[1]); err != nil {
			return nil, "", fmt.Errorf("failed to encode form field %q: %w", f[0], err)
		}
	}
	if ff != nil {
		h := make(textproto.MIMEHeader)
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="%s"; filename="%s"`,
			quoteEscaper.Replace(ff.field), quoteEscaper.Replace(safeFileName(ff.file.Name))))
		mt := ff.file.MediaType
		if mt == "" {
			mt = "application/octet-stream"
		}
		h.Set("Content-Type", mt)
		pw, err := w.CreatePart(h)
		if err != nil {
			return nil, "", fmt.Errorf("failed to encode file %q: %w", ff.file.Name, err)
		}
		if _, err := pw.Write(ff.file.Data); err != nil {
			return nil, "", fmt.Errorf("failed to encode file %q: %w", ff.file.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, "", fmt.Errorf("failed to encode form: %w", err)
	}
	return &buf, w.FormDataContentType(), nil
}

var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "", "\n", "")

// safeFileName keeps the base name of a file and never returns "".
func safeFileName(name string) string {
	name = strings.TrimSpace(name)
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	if name == "" || name == "." || name == ".." {
		return "file"
	}
	return name
}

// isPhoto reports whether a media type is shown inline as a picture by the
// chat platforms (others are sent as documents).
func isPhoto(mediaType string) bool {
	switch strings.ToLower(strings.TrimSpace(strings.SplitN(mediaType, ";", 2)[0])) {
	case "image/jpeg", "image/png", "image/webp", "image/gif":
		return true
	}
	return false
}

// splitText cuts s into chunks of at most limit UTF-16 code units (the unit
// platforms count message length in), preferring to cut after a newline in
// the second half of a chunk. An empty s gives no chunks.
func splitText(s string, limit int) []string {
	var out []string
	for s != "" {
		n, cut, lastNL := 0, len(s), -1
		for i, r := range s {
			w := 1
			if r >= 0x10000 {
				w = utf16.RuneLen(r)
			}
			if n+w > limit {
				cut = i
				break
			}
			n += w
			if r == '\n' {
				lastNL = i + 1
			}
		}
		if cut < len(s) && lastNL > cut/2 {
			cut = lastNL
		}
		if cut == 0 { // a limit below one rune: take one anyway
			_, cut = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}
