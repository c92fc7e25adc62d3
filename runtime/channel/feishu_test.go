package channel

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

const (
	fsVerifyToken = "xxxxxx" // the token in the recorded payloads
	fsEncryptKey  = "kudryavka-encrypt-key"
)

// feishuEncrypt seals plain the way the Feishu Open Platform does.
func feishuEncrypt(key string, plain []byte) string {
	k := sha256.Sum256([]byte(key))
	block, _ := aes.NewCipher(k[:])
	pad := aes.BlockSize - len(plain)%aes.BlockSize
	plain = append(append([]byte(nil), plain...), bytes.Repeat([]byte{byte(pad)}, pad)...)
	out := make([]byte, aes.BlockSize+len(plain))
	_, _ = rand.Read(out[:aes.BlockSize])
	cipher.NewCBCEncrypter(block, out[:aes.BlockSize]).CryptBlocks(out[aes.BlockSize:], plain)
	return base64.StdEncoding.EncodeToString(out)
}

// fakeFeishu is the Open API: tenant tokens (which it can revoke) and the
// message, image and file endpoints, checking the bearer token.
type fakeFeishu struct {
	*fakeAPI
	mu     sync.Mutex
	tokenN int
}

func (f *fakeFeishu) current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("t-%d", f.tokenN)
}

// revoke invalidates the issued token, as its expiry or an app secret reset would.
func (f *fakeFeishu) revoke() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenN++
}

func newFakeFeishu(t *testing.T) *fakeFeishu {
	f := &fakeFeishu{fakeAPI: newFakeAPI(t, urlPath), tokenN: 1}
	f.route("/open-apis/auth/v3/tenant_access_token/internal", func(r recorded) canned {
		if r.JSON()["app_secret"] != "app-secret" {
			return canned{body: map[string]any{"code": 10014, "msg": "app secret invalid"}}
		}
		return canned{body: map[string]any{"code": 0, "msg": "ok", "tenant_access_token": f.current(), "expire": 7200}}
	})
	authed := func(fn func(r recorded) canned) func(r recorded) canned {
		return func(r recorded) canned {
			if r.Header.Get("Authorization") != "Bearer "+f.current() {
				return canned{status: 400, body: map[string]any{"code": 99991663, "msg": "Invalid access token for authorization"}}
			}
			return fn(r)
		}
	}
	n := 0
	f.route("/open-apis/im/v1/messages", authed(func(recorded) canned {
		n++
		return canned{body: map[string]any{"code": 0, "msg": "success", "data": map[string]any{"message_id": fmt.Sprintf("om_%d", n)}}}
	}))
	f.route("/open-apis/im/v1/images", authed(func(recorded) canned {
		return canned{body: map[string]any{"code": 0, "data": map[string]any{"image_key": "img_v2_1"}}}
	}))
	f.route("/open-apis/im/v1/files", authed(func(recorded) canned {
		return canned{body: map[string]any{"code": 0, "data": map[string]any{"file_key": "file_v2_1"}}}
	}))
	f.route("/open-apis/im/v1/messages/om_1/resources/img_v2_1", authed(func(recorded) canned {
		return canned{body: []byte("PNGDATA")}
	}))
	return f
}

func feishuEnv(t testing.TB, api *fakeAPI, encryptKey string) *testEnv {
	kv := map[string]string{KeyFeishuAppID: "cli_9f5343c580712544", KeyFeishuAppSecret: "app-secret", KeyFeishuVerifyToken: fsVerifyToken}
	if encryptKey != "" {
		kv[KeyFeishuEncryptKey] = encryptKey
	}
	return newEnv(t, Options{BaseURLs: BaseURLs{Feishu: api.URL}}, []picobotv1alpha1.Channel{ch(TypeFeishu, "lark", "fs")},
		map[string]map[string]string{"fs": kv})
}

// signed returns the encrypted envelope of plain with Lark signature headers.
func feishuSigned(key string, plain []byte) ([]byte, map[string]string) {
	body, _ := json.Marshal(map[string]string{"encrypt": feishuEncrypt(key, plain)})
	ts, nonce := fmt.Sprint(time.Now().Unix()), "13911"
	return body, map[string]string{HeaderLarkTimestamp: ts, HeaderLarkNonce: nonce, HeaderLarkSignature: FeishuSignature(ts, nonce, key, body)}
}

func TestFeishuDecryptDocumentedVector(t *testing.T) {
	g := NewWithT(t)
	// The example of Feishu's "Encrypt Key" guide.
	plain, err := FeishuDecrypt("test key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(plain)).To(Equal("hello world"))
	_, err = FeishuDecrypt("other key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=")
	g.Expect(err).To(MatchError(ContainSubstring("bad padding")))
	_, err = FeishuDecrypt("test key", "not base64!")
	g.Expect(err).To(MatchError(ContainSubstring("not base64")))
	_, err = FeishuDecrypt("test key", base64.StdEncoding.EncodeToString([]byte("short")))
	g.Expect(err).To(MatchError(ContainSubstring("not an IV and whole AES blocks")))
}

func TestFeishuWebhookPlain(t *testing.T) {
	g := NewWithT(t)
	e := feishuEnv(t, newFakeFeishu(t).fakeAPI, "")
	path := HookPath(tenant, agentName, "lark")

	status, ans := e.post(t, path, testdata(t, "feishu_url_verification.json"), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(Equal(map[string]any{"challenge": "ajls384kdjx98XX"}))

	status, _ = e.post(t, path, testdata(t, "feishu_im_message_receive_v1.json"), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	status, _ = e.post(t, path, testdata(t, "feishu_im_message_receive_v1_image.json"), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	got := e.box.all()
	g.Expect(got).To(HaveLen(2))
	g.Expect(got[0].In).To(Equal(Inbound{Channel: "lark", Type: TypeFeishu, ChatID: "oc_5ce6d572455d361153b7xx51da133945",
		MessageID: "om_5ce6d572455d361153b7cb51da133945", Sender: "ou_84aad35d084aa403a838cf73ee18467",
		Text: "@_user_1 hello", Time: time.UnixMilli(1609073151345).UTC()}))
	g.Expect(got[1].In.Files).To(Equal([]File{{Name: "image.png", MediaType: "image/png",
		Ref: "om_dc13264520392913993dd051dba21dcf:image:img_v2_041b28e3-5680-48c2-9af2-497ace79333g"}}))

	// Feishu retries a push it got no 200 for: same event_id, handed on once.
	status, ans = e.post(t, path, testdata(t, "feishu_im_message_receive_v1.json"), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(HaveKeyWithValue("duplicate", true))

	forged := bytes.Replace(testdata(t, "feishu_im_message_receive_v1.json"), []byte(`"token": "xxxxxx"`), []byte(`"token": "guess"`), 1)
	forged = bytes.Replace(forged, []byte("5e3702a8"), []byte("00000000"), 1)
	status, ans = e.post(t, path, forged, nil)
	g.Expect(status).To(Equal(http.StatusUnauthorized))
	g.Expect(errorCode(ans)).To(Equal(CodeBadToken))

	status, ans = e.post(t, path, []byte(`{"challenge":"x","token":"guess","type":"url_verification"}`), nil)
	g.Expect(status).To(Equal(http.StatusUnauthorized))
	g.Expect(errorCode(ans)).To(Equal(CodeBadToken))

	status, ans = e.post(t, path, []byte(`{"uuid":"1","token":"xxxxxx","type":"event_callback","event":{}}`), nil)
	g.Expect(status).To(Equal(http.StatusBadRequest), "schema 1.0 events are not supported")
	g.Expect(errorCode(ans)).To(Equal(CodeBadRequest))

	status, ans = e.post(t, path, []byte(`{"encrypt":"abc"}`), nil)
	g.Expect(status).To(Equal(http.StatusBadRequest), "no encryptKey configured")
	g.Expect(errorCode(ans)).To(Equal(CodeBadRequest))
	g.Expect(e.box.all()).To(HaveLen(2))
}

func TestFeishuWebhookEncrypted(t *testing.T) {
	g := NewWithT(t)
	e := feishuEnv(t, newFakeFeishu(t).fakeAPI, fsEncryptKey)
	path := HookPath(tenant, agentName, "lark")

	// The challenge comes encrypted and unsigned.
	body, _ := json.Marshal(map[string]string{"encrypt": feishuEncrypt(fsEncryptKey, testdata(t, "feishu_url_verification.json"))})
	status, ans := e.post(t, path, body, nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(ans).To(Equal(map[string]any{"challenge": "ajls384kdjx98XX"}))

	body, hdr := feishuSigned(fsEncryptKey, testdata(t, "feishu_im_message_receive_v1.json"))
	status, _ = e.post(t, path, body, hdr)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(e.box.all()).To(HaveLen(1))
	g.Expect(e.box.all()[0].In.Text).To(Equal("@_user_1 hello"))

	for _, tc := range []struct {
		name   string
		mutate func(body []byte, h map[string]string) []byte
		status int
		code   string
	}{
		{"missing signature", func(b []byte, h map[string]string) []byte { delete(h, HeaderLarkSignature); return b }, 401, CodeBadSignature},
		{"forged signature", func(b []byte, h map[string]string) []byte {
			h[HeaderLarkSignature] = strings.Repeat("ab", 32)
			return b
		}, 401, CodeBadSignature},
		{"other nonce", func(b []byte, h map[string]string) []byte { h[HeaderLarkNonce] = "1"; return b }, 401, CodeBadSignature},
		{"plaintext", func([]byte, map[string]string) []byte { return testdata(t, "feishu_im_message_receive_v1_image.json") }, 400, CodeBadRequest},
		{"wrong key", func(_ []byte, h map[string]string) []byte {
			b, hh := feishuSigned("another key", testdata(t, "feishu_im_message_receive_v1_image.json"))
			for k, v := range hh {
				h[k] = v
			}
			return b
		}, 400, CodeMalformed},
		{"garbage", func([]byte, map[string]string) []byte { return []byte(`{"encrypt":`) }, 400, CodeMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			body, hdr := feishuSigned(fsEncryptKey, testdata(t, "feishu_im_message_receive_v1_image.json"))
			body = tc.mutate(body, hdr)
			status, ans := e.post(t, path, body, hdr)
			g.Expect(status).To(Equal(tc.status))
			g.Expect(errorCode(ans)).To(Equal(tc.code))
		})
	}
	g.Expect(e.box.all()).To(HaveLen(1), "nothing refused is handed on")
}

func TestFeishuSend(t *testing.T) {
	g := NewWithT(t)
	api := newFakeFeishu(t)
	e := feishuEnv(t, api.fakeAPI, "")
	c, err := e.m.Lookup(tenant, agentName, "lark")
	g.Expect(err).NotTo(HaveOccurred())
	const tokenPath = "/open-apis/auth/v3/tenant_access_token/internal"

	r, err := c.Send(t.Context(), Outbound{ChatID: "oc_abc", Text: "hello"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.MessageIDs).To(Equal([]string{"om_1"}))
	msg := api.requests("/open-apis/im/v1/messages")[0]
	g.Expect(msg.Query).To(HaveKeyWithValue("receive_id_type", "chat_id"))
	g.Expect(msg.JSON()).To(Equal(map[string]any{"receive_id": "oc_abc", "msg_type": "text", "content": `{"text":"hello"}`}))

	// The token is cached until near its expiry.
	_, err = c.Send(t.Context(), Outbound{ChatID: "ou_user", Text: "again"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(api.requests(tokenPath)).To(HaveLen(1))
	g.Expect(api.requests("/open-apis/im/v1/messages")[1].Query).To(HaveKeyWithValue("receive_id_type", "open_id"))
	e.clock.Step(2 * time.Hour)
	_, err = c.Send(t.Context(), Outbound{ChatID: "oc_abc", Text: "later"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(api.requests(tokenPath)).To(HaveLen(2))

	// A token the platform no longer accepts is replaced and the call retried once.
	api.revoke()
	_, err = c.Send(t.Context(), Outbound{ChatID: "oc_abc", Text: "after revoke"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(api.requests(tokenPath)).To(HaveLen(3))

	// Files: images are uploaded and sent as images, others as files.
	_, err = c.Send(t.Context(), Outbound{ChatID: "oc_abc", Files: []File{
		{Name: "shot.png", MediaType: "image/png", Data: []byte("PNG")}, {Name: "notes.pdf", MediaType: "application/pdf", Data: []byte("%PDF")}}})
	g.Expect(err).NotTo(HaveOccurred())
	img := api.requests("/open-apis/im/v1/images")[0]
	g.Expect(img.Form).To(Equal(map[string]string{"image_type": "message"}))
	g.Expect(img.Files["image"].Data).To(Equal([]byte("PNG")))
	file := api.requests("/open-apis/im/v1/files")[0]
	g.Expect(file.Form).To(Equal(map[string]string{"file_type": "pdf", "file_name": "notes.pdf"}))
	msgs := api.requests("/open-apis/im/v1/messages")
	g.Expect(msgs[len(msgs)-2].JSON()).To(HaveKeyWithValue("content", `{"image_key":"img_v2_1"}`))
	g.Expect(msgs[len(msgs)-1].JSON()).To(And(HaveKeyWithValue("msg_type", "file"), HaveKeyWithValue("content", `{"file_key":"file_v2_1"}`)))

	data, err := c.(Fetcher).Fetch(t.Context(), File{Ref: "om_1:image:img_v2_1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("PNGDATA"))
}

func TestFeishuSendErrors(t *testing.T) {
	api := newFakeFeishu(t)
	e := feishuEnv(t, api.fakeAPI, "")
	c, _ := e.m.Lookup(tenant, agentName, "lark")
	checkSendErrors(t, api.fakeAPI, "/open-apis/im/v1/messages", c, "oc_abc", []sendErrorCase{
		{"rate limited", canned{status: 429, header: map[string]string{"x-ogw-ratelimit-reset": "3"},
			body: map[string]any{"code": 99991400, "msg": "request trigger frequency limit"}}, true, 3 * time.Second, "99991400"},
		{"server error", canned{status: 500, body: map[string]any{"code": 1500, "msg": "internal error"}}, true, 0, "1500"},
		{"bot not in chat", canned{status: 400, body: map[string]any{"code": 230002, "msg": "Bot/User can NOT be out of the chat."}}, false, 0, "230002"},
		{"refused in a 200", canned{body: map[string]any{"code": 230001, "msg": "invalid receive_id"}}, false, 0, "230001"},
	})

	// Wrong app credentials: a permanent failure naming the cause.
	bad := newEnv(t, Options{BaseURLs: BaseURLs{Feishu: api.URL}}, []picobotv1alpha1.Channel{ch(TypeFeishu, "", "fs")},
		map[string]map[string]string{"fs": {KeyFeishuAppID: "cli_x", KeyFeishuAppSecret: "wrong", KeyFeishuEncryptKey: "k"}})
	bc, _ := bad.m.Lookup(tenant, agentName, "feishu")
	_, err := bc.Send(t.Context(), Outbound{ChatID: "oc_abc", Text: "x"})
	g := NewWithT(t)
	g.Expect(err).To(MatchError(ContainSubstring("app secret invalid")))
	g.Expect(IsTransient(err)).To(BeFalse())
}

func TestFeishuPostText(t *testing.T) {
	g := NewWithT(t)
	g.Expect(feishuPostText(`{"title":"Weekly","content":[[{"tag":"text","text":"see "},{"tag":"a","text":"doc","href":"https://x"}],[{"tag":"at","user_name":"Tom"},{"tag":"img","image_key":"k"}]]}`)).
		To(Equal("Weekly\nsee doc\n@Tom"))
	g.Expect(feishuPostText(`{"zh_cn":{"title":"周报","content":[[{"tag":"text","text":"你好"}]]}}`)).To(Equal("周报\n你好"))
	text, files := feishuContent("om_1", "sticker", `{"file_key":"x"}`)
	g.Expect(text).To(Equal("[sticker message]"))
	g.Expect(files).To(BeEmpty())
}
