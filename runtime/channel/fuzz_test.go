package channel

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// The fuzzers feed arbitrary bodies, correctly signed, through the whole
// webhook handler of each platform: whatever arrives, the answer is a 200 or
// a 4xx JSON error, never a panic or a 5xx, and a refused request hands
// nothing on.

func fuzzHook(f *testing.F, e *testEnv, path string, sign func(body []byte) ([]byte, map[string]string), seeds ...string) {
	for _, s := range seeds {
		f.Add(testdata(f, s))
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"type":"event_callback","event_id":"E","event":{"type":"message","user":"U","channel":"C","ts":"1.2"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		before := len(e.box.all())
		wire, h := sign(body)
		status, ans := e.post(t, path, wire, h)
		if !slices.Contains([]int{http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized}, status) {
			t.Fatalf("status %d (%v) for body %q", status, ans, body)
		}
		if ans == nil {
			t.Fatalf("answer is not a JSON object for body %q", body)
		}
		if status != http.StatusOK && len(e.box.all()) != before {
			t.Fatalf("refused request (%d) handed a message on", status)
		}
		for _, h := range e.box.all()[before:] {
			if h.In.ChatID == "" || h.In.MessageID == "" {
				t.Fatalf("handed on a message without chat or message id: %+v", h.In)
			}
		}
	})
}

func FuzzTelegramWebhook(f *testing.F) {
	e := telegramEnv(f, noAPI(), "s3cret-token", Options{})
	fuzzHook(f, e, HookPath(tenant, agentName, "telegram"), func(b []byte) ([]byte, map[string]string) {
		return b, map[string]string{HeaderTelegramSecret: "s3cret-token"}
	}, "telegram_update_text.json", "telegram_update_photo.json", "telegram_update_document.json", "telegram_update_edited.json")
}

func FuzzFeishuWebhook(f *testing.F) {
	e := feishuEnv(f, noAPI(), fsEncryptKey)
	fuzzHook(f, e, HookPath(tenant, agentName, "lark"), func(b []byte) ([]byte, map[string]string) {
		return feishuSigned(fsEncryptKey, b)
	}, "feishu_url_verification.json", "feishu_im_message_receive_v1.json", "feishu_im_message_receive_v1_image.json")
}

func FuzzFeishuWebhookPlain(f *testing.F) {
	e := feishuEnv(f, noAPI(), "")
	fuzzHook(f, e, HookPath(tenant, agentName, "lark"), func(b []byte) ([]byte, map[string]string) { return b, nil },
		"feishu_url_verification.json", "feishu_im_message_receive_v1.json", "feishu_im_message_receive_v1_image.json")
}

func FuzzFeishuDecrypt(f *testing.F) {
	f.Add("test key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=")
	f.Add("k", "")
	f.Add("k", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Fuzz(func(t *testing.T, key, enc string) {
		plain, err := FeishuDecrypt(key, enc)
		if err != nil {
			return
		}
		// What decrypts must decrypt again to the same after a round trip.
		again, err := FeishuDecrypt(key, feishuEncrypt(key, plain))
		if err != nil || string(again) != string(plain) {
			t.Fatalf("round trip of %q failed: %v", plain, err)
		}
	})
}

func FuzzSlackWebhook(f *testing.F) {
	e := slackEnv(f, noAPI())
	fuzzHook(f, e, HookPath(tenant, agentName, "slack"), func(b []byte) ([]byte, map[string]string) {
		return b, slackSign(slackSecret, time.Now(), b)
	}, "slack_url_verification.json", "slack_event_message_im.json", "slack_event_app_mention.json",
		"slack_event_message_channels.json", "slack_event_bot_message.json")
}

func FuzzWebhookInbound(f *testing.F) {
	e := webhookEnv(f, "")
	fuzzHook(f, e, HookPath(tenant, agentName, "tickets"), func(b []byte) ([]byte, map[string]string) {
		return b, picoSign(hookSecret, e.clock.Now(), b)
	}, "webhook_inbound.json")
}

// FuzzTelegramUpdates is the polling side: a getUpdates batch of anything
// never stops the poller and advances the offset past what it read.
func FuzzTelegramUpdates(f *testing.F) {
	f.Add(testdata(f, "telegram_update_text.json"))
	f.Add([]byte(`{"update_id": -5}`))
	tg := &telegram{buildEnv: buildEnv{name: "telegram", log: discardLog()}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // getUpdates results are JSON by construction
		}
		_, err := tg.handleUpdates(t.Context(), []json.RawMessage{raw}, 0, func(context.Context, event) error { return nil })
		if err != nil {
			t.Fatalf("batch failed: %v", err)
		}
	})
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// noAPI is a platform address nothing listens on: the webhook fuzzers never send.
func noAPI() *fakeAPI { return &fakeAPI{Server: &httptest.Server{URL: "http://127.0.0.1:1"}} }
