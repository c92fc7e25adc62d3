package channel

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// The Feishu/Lark client is hand-written: the official SDK
// (github.com/larksuite/oapi-sdk-go) is not served by our module proxy, and
// what we use — event decryption and signature checks, a cached tenant
// access token, uploads and im/v1/messages — is a few hundred lines.

// Feishu signature headers, sent with events when an Encrypt Key is configured.
const (
	HeaderLarkTimestamp = "X-Lark-Request-Timestamp"
	HeaderLarkNonce     = "X-Lark-Request-Nonce"
	HeaderLarkSignature = "X-Lark-Signature"
)

const (
	feishuAPI = "https://open.feishu.cn"
	// feishuTextLimit keeps a text message well inside the 150 KB request cap.
	feishuTextLimit = 30000
	// feishuTokenMargin renews the tenant access token this long before it expires.
	feishuTokenMargin = 5 * time.Minute
	// Feishu error codes that matter to us.
	feishuRateLimited = 99991400
)

// feishuTokenInvalid are the codes of an expired or revoked tenant access
// token: the token is fetched again and the call retried once.
var feishuTokenInvalid = map[int]bool{99991661: true, 99991663: true, 99991668: true}

type feishu struct {
	buildEnv
	base, appID, appSecret, verifyToken, encryptKey string

	mu       sync.Mutex
	token    string
	tokenExp time.Time
}

func newFeishu(env buildEnv, base, appID, appSecret, verifyToken, encryptKey string) hosted {
	if base == "" {
		base = feishuAPI
	}
	f := &feishu{buildEnv: env, base: strings.TrimRight(base, "/"), appID: appID, appSecret: appSecret,
		verifyToken: verifyToken, encryptKey: encryptKey}
	return hosted{Channel: f, recv: f}
}

func (f *feishu) Name() string                      { return f.name }
func (f *feishu) Type() picobotv1alpha1.ChannelType { return TypeFeishu }

// feishuCallback is an event callback (schema 2.0) or a URL verification.
type feishuCallback struct {
	Encrypt   string `json:"encrypt"`
	Schema    string `json:"schema"`
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	Token     string `json:"token"`
	Header    struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		Token     string `json:"token"`
	} `json:"header"`
	Event json.RawMessage `json:"event"`
}

type feishuMessageEvent struct {
	Sender struct {
		SenderID struct {
			OpenID  string `json:"open_id"`
			UserID  string `json:"user_id"`
			UnionID string `json:"union_id"`
		} `json:"sender_id"`
		SenderType string `json:"sender_type"`
	} `json:"sender"`
	Message struct {
		MessageID   string `json:"message_id"`
		ChatID      string `json:"chat_id"`
		MessageType string `json:"message_type"`
		Content     string `json:"content"`
		CreateTime  string `json:"create_time"`
	} `json:"message"`
}

func (f *feishu) receive(r *http.Request, body []byte) (hookReply, error) {
	var cb feishuCallback
	if err := json.Unmarshal(body, &cb); err != nil {
		return hookReply{}, refuse(http.StatusBadRequest, CodeMalformed, "event is not valid JSON: %v", err)
	}
	switch {
	case cb.Encrypt != "" && f.encryptKey == "":
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "the event is encrypted but no encryptKey is configured for this channel")
	case cb.Encrypt == "" && f.encryptKey != "":
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "expected an encrypted event: this channel has an encryptKey")
	case cb.Encrypt != "":
		plain, err := FeishuDecrypt(f.encryptKey, cb.Encrypt)
		if err != nil {
			return hookReply{}, refuse(http.StatusBadRequest, CodeMalformed, "%v", err)
		}
		cb = feishuCallback{}
		if err := json.Unmarshal(plain, &cb); err != nil {
			return hookReply{}, refuse(http.StatusBadRequest, CodeMalformed, "decrypted event is not valid JSON: %v", err)
		}
	}

	if cb.Type == "url_verification" {
		if !f.tokenOK(cb.Token) {
			return hookReply{}, refuse(http.StatusUnauthorized, CodeBadToken, "wrong verification token")
		}
		return hookReply{body: map[string]string{"challenge": cb.Challenge}}, nil
	}
	if f.encryptKey != "" {
		if err := f.checkSignature(r.Header, body); err != nil {
			return hookReply{}, err
		}
	}
	if cb.Schema != "2.0" {
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "unsupported event schema %q: subscribe with event schema 2.0", cb.Schema)
	}
	if !f.tokenOK(cb.Header.Token) {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadToken, "wrong verification token")
	}
	if cb.Header.EventID == "" {
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "event has no header.event_id")
	}
	if cb.Header.EventType != "im.message.receive_v1" {
		return hookReply{}, nil
	}
	var me feishuMessageEvent
	if err := json.Unmarshal(cb.Event, &me); err != nil {
		return hookReply{}, refuse(http.StatusBadRequest, CodeMalformed, "im.message.receive_v1 event is malformed: %v", err)
	}
	m := me.Message
	if m.MessageID == "" || m.ChatID == "" {
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "message lacks message_id or chat_id")
	}
	if me.Sender.SenderType != "user" {
		return hookReply{}, nil
	}
	in := Inbound{Channel: f.name, Type: TypeFeishu, ChatID: m.ChatID, MessageID: m.MessageID,
		Sender: me.Sender.SenderID.OpenID}
	if ms, err := strconv.ParseInt(m.CreateTime, 10, 64); err == nil {
		in.Time = time.UnixMilli(ms).UTC()
	}
	in.Text, in.Files = feishuContent(m.MessageID, m.MessageType, m.Content)
	return hookReply{events: []event{{keys: []string{"e:" + cb.Header.EventID, "m:" + m.MessageID}, in: in}}}, nil
}

// tokenOK compares a verification token in constant time; without a
// configured token (encryption alone authenticates) any token passes.
func (f *feishu) tokenOK(got string) bool {
	return f.verifyToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(f.verifyToken)) == 1
}

// checkSignature verifies X-Lark-Signature = hex(sha256(timestamp + nonce +
// encryptKey + body)).
func (f *feishu) checkSignature(h http.Header, body []byte) error {
	sig := h.Get(HeaderLarkSignature)
	if sig == "" {
		return refuse(http.StatusUnauthorized, CodeBadSignature, "missing %s header", HeaderLarkSignature)
	}
	want := FeishuSignature(h.Get(HeaderLarkTimestamp), h.Get(HeaderLarkNonce), f.encryptKey, body)
	if subtle.ConstantTimeCompare([]byte(strings.ToLower(sig)), []byte(want)) != 1 {
		return refuse(http.StatusUnauthorized, CodeBadSignature, "wrong %s", HeaderLarkSignature)
	}
	return nil
}

// FeishuSignature is the X-Lark-Signature of a request.
func FeishuSignature(timestamp, nonce, encryptKey string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(timestamp + nonce + encryptKey))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// FeishuDecrypt opens an {"encrypt": ...} payload: base64 of IV (16 bytes)
// and AES-256-CBC ciphertext with PKCS#7 padding, keyed by
// SHA-256(encryptKey).
func FeishuDecrypt(encryptKey, encrypted string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil {
		return nil, fmt.Errorf("encrypted event is not base64: %w", err)
	}
	if len(raw) < 2*aes.BlockSize || len(raw)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("encrypted event has %d bytes: not an IV and whole AES blocks", len(raw))
	}
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("failed to set up AES: %w", err)
	}
	plain := make([]byte, len(raw)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, raw[:aes.BlockSize]).CryptBlocks(plain, raw[aes.BlockSize:])
	pad := int(plain[len(plain)-1])
	if pad < 1 || pad > aes.BlockSize || !bytes.Equal(plain[len(plain)-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
		return nil, errors.New("failed to decrypt event: bad padding (wrong encryptKey?)")
	}
	return plain[:len(plain)-pad], nil
}

// feishuContent turns a message's content JSON into text and file
// references (Ref "<message_id>:<image|file>:<key>", what Fetch needs).
func feishuContent(messageID, msgType, content string) (string, []File) {
	var c struct {
		Text     string `json:"text"`
		ImageKey string `json:"image_key"`
		FileKey  string `json:"file_key"`
		FileName string `json:"file_name"`
	}
	_ = json.Unmarshal([]byte(content), &c)
	switch msgType {
	case "text":
		return c.Text, nil
	case "image":
		return "", []File{{Name: "image.png", MediaType: "image/png", Ref: messageID + ":image:" + c.ImageKey}}
	case "file", "audio", "media":
		name := c.FileName
		if name == "" {
			name = msgType
		}
		return "", []File{{Name: name, Ref: messageID + ":file:" + c.FileKey}}
	case "post":
		return feishuPostText(content), nil
	}
	return "[" + msgType + " message]", nil
}

// feishuPostText flattens a rich-text post (optionally keyed by language)
// to plain text.
func feishuPostText(content string) string {
	type post struct {
		Title   string `json:"title"`
		Content [][]struct {
			Tag      string `json:"tag"`
			Text     string `json:"text"`
			UserName string `json:"user_name"`
		} `json:"content"`
	}
	var p post
	if err := json.Unmarshal([]byte(content), &p); err != nil || (p.Title == "" && len(p.Content) == 0) {
		var byLang map[string]post
		if json.Unmarshal([]byte(content), &byLang) == nil {
			for _, v := range byLang {
				p = v
				break
			}
		}
	}
	var lines []string
	if p.Title != "" {
		lines = append(lines, p.Title)
	}
	for _, para := range p.Content {
		var b strings.Builder
		for _, el := range para {
			switch el.Tag {
			case "text", "a", "code_block", "md":
				b.WriteString(el.Text)
			case "at":
				b.WriteString("@" + el.UserName)
			}
		}
		lines = append(lines, b.String())
	}
	return strings.Join(lines, "\n")
}

// accessToken returns the cached tenant access token, fetching a new one
// when it is missing, near expiry, or refresh is set.
func (f *feishu) accessToken(ctx context.Context, refresh bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !refresh && f.token != "" && f.clock.Now().Before(f.tokenExp) {
		return f.token, nil
	}
	b, _ := json.Marshal(map[string]string{"app_id": f.appID, "app_secret": f.appSecret})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/open-apis/auth/v3/tenant_access_token/internal", bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("failed to build feishu token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	res, err := do(f.hc, req)
	if err != nil {
		return "", err
	}
	var a struct {
		Code   int    `json:"code"`
		Msg    string `json:"msg"`
		Token  string `json:"tenant_access_token"`
		Expire int64  `json:"expire"`
	}
	if err := json.Unmarshal(res.body, &a); err != nil || a.Code != 0 || res.status >= 300 || a.Token == "" {
		return "", feishuError(res, a.Code, "tenant access token: "+a.Msg)
	}
	f.token = a.Token
	f.tokenExp = f.clock.Now().Add(time.Duration(a.Expire)*time.Second - feishuTokenMargin)
	return f.token, nil
}

// api calls an Open API endpoint with the tenant access token, fetching a new
// token and retrying once when the platform says it is invalid. body is
// called per attempt.
func (f *feishu) api(ctx context.Context, path string, body func() (io.Reader, string, error), out any) error {
	return f.apiMethod(ctx, http.MethodPost, path, body, out)
}

// apiMethod is api with another HTTP method; body may be nil (GET, DELETE).
func (f *feishu) apiMethod(ctx context.Context, method, path string, body func() (io.Reader, string, error), out any) error {
	for attempt := 0; ; attempt++ {
		tok, err := f.accessToken(ctx, attempt > 0)
		if err != nil {
			return err
		}
		var rd io.Reader
		ct := ""
		if body != nil {
			if rd, ct, err = body(); err != nil {
				return err
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, f.base+path, rd)
		if err != nil {
			return fmt.Errorf("failed to build feishu request: %w", err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := do(f.hc, req)
		if err != nil {
			return err
		}
		var a struct {
			Code int             `json:"code"`
			Msg  string          `json:"msg"`
			Data json.RawMessage `json:"data"`
		}
		jerr := json.Unmarshal(res.body, &a)
		if jerr == nil && a.Code == 0 && res.status < 300 {
			if out != nil && len(a.Data) > 0 {
				if err := json.Unmarshal(a.Data, out); err != nil {
					return &SendError{Err: fmt.Errorf("feishu %s answered unexpected data: %w", path, err)}
				}
			}
			return nil
		}
		if feishuTokenInvalid[a.Code] && attempt == 0 {
			continue
		}
		return feishuError(res, a.Code, a.Msg)
	}
}

// feishuError classifies a failed Open API call: rate limits (HTTP 429 or
// code 99991400, waiting x-ogw-ratelimit-reset seconds) and server errors are
// transient.
func feishuError(res httpResult, code int, msg string) *SendError {
	status := res.status
	if code == feishuRateLimited {
		status = http.StatusTooManyRequests
	}
	if msg == "" {
		msg = truncate(string(res.body), 200)
	}
	if status < 300 {
		status = http.StatusBadRequest // code != 0 in a 200 answer: the request was refused
	}
	se := statusError(status, res.header, strconv.Itoa(code), "feishu: "+msg)
	if se.Transient && se.RetryAfter == 0 {
		if s, err := strconv.Atoi(res.header.Get("x-ogw-ratelimit-reset")); err == nil && s > 0 {
			se.RetryAfter = time.Duration(s) * time.Second
		}
	}
	return se
}

// receiveIDType picks receive_id_type from the shape of the target id.
func receiveIDType(id string) string {
	switch {
	case strings.HasPrefix(id, "ou_"):
		return "open_id"
	case strings.HasPrefix(id, "on_"):
		return "union_id"
	case strings.Contains(id, "@"):
		return "email"
	}
	return "chat_id"
}

// Send implements Channel: the text (in chunks), then each file uploaded
// and sent as an image or file message.
func (f *feishu) Send(ctx context.Context, out Outbound) (Receipt, error) {
	path := "/open-apis/im/v1/messages?receive_id_type=" + receiveIDType(out.ChatID)
	sendMsg := func(ctx context.Context, msgType string, content any) (string, error) {
		c, _ := json.Marshal(content)
		b, _ := json.Marshal(map[string]string{"receive_id": out.ChatID, "msg_type": msgType, "content": string(c)})
		var r struct {
			MessageID string `json:"message_id"`
		}
		err := f.api(ctx, path, func() (io.Reader, string, error) {
			return bytes.NewReader(b), "application/json; charset=utf-8", nil
		}, &r)
		return r.MessageID, err
	}
	var parts []part
	for _, c := range splitText(out.Text, feishuTextLimit) {
		parts = append(parts, func(ctx context.Context) (string, error) {
			return sendMsg(ctx, "text", map[string]string{"text": c})
		})
	}
	for _, file := range out.Files {
		parts = append(parts, func(ctx context.Context) (string, error) {
			if isPhoto(file.MediaType) {
				var up struct {
					ImageKey string `json:"image_key"`
				}
				err := f.api(ctx, "/open-apis/im/v1/images", func() (io.Reader, string, error) {
					return multipartBody([][2]string{{"image_type", "message"}}, &formFile{field: "image", file: file})
				}, &up)
				if err != nil {
					return "", err
				}
				return sendMsg(ctx, "image", map[string]string{"image_key": up.ImageKey})
			}
			var up struct {
				FileKey string `json:"file_key"`
			}
			err := f.api(ctx, "/open-apis/im/v1/files", func() (io.Reader, string, error) {
				return multipartBody([][2]string{{"file_type", feishuFileType(file)}, {"file_name", safeFileName(file.Name)}},
					&formFile{field: "file", file: file})
			}, &up)
			if err != nil {
				return "", err
			}
			return sendMsg(ctx, "file", map[string]string{"file_key": up.FileKey})
		})
	}
	if len(parts) == 0 {
		return Receipt{}, &SendError{Channel: f.name, Err: errors.New("nothing to send: the message has no text and no files")}
	}
	return sendParts(ctx, f.name, out.FromPart, parts)
}

// feishuFileType is the upload file_type Feishu wants for a file.
func feishuFileType(f File) string {
	name := strings.ToLower(f.Name)
	for _, t := range []struct{ ext, typ string }{
		{".opus", "opus"}, {".mp4", "mp4"}, {".pdf", "pdf"}, {".doc", "doc"}, {".docx", "doc"},
		{".xls", "xls"}, {".xlsx", "xls"}, {".ppt", "ppt"}, {".pptx", "ppt"},
	} {
		if strings.HasSuffix(name, t.ext) {
			return t.typ
		}
	}
	return "stream"
}

// Fetch implements Fetcher for the files of inbound messages.
func (f *feishu) Fetch(ctx context.Context, file File) ([]byte, error) {
	parts := strings.SplitN(file.Ref, ":", 3)
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return nil, fmt.Errorf("invalid feishu file reference %q", file.Ref)
	}
	tok, err := f.accessToken(ctx, false)
	if err != nil {
		return nil, err
	}
	u := f.base + "/open-apis/im/v1/messages/" + url.PathEscape(parts[0]) + "/resources/" + url.PathEscape(parts[2]) + "?type=" + url.QueryEscape(parts[1])
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build feishu download request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := doLimit(f.hc, req, maxInboundFile)
	if err != nil {
		return nil, fmt.Errorf("failed to download feishu file: %w", err)
	}
	if res.status != http.StatusOK {
		return nil, fmt.Errorf("failed to download feishu file: %w", feishuError(res, 0, ""))
	}
	return res.body, nil
}
