package channel

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// The benchmarks measure one inbound webhook request through the whole
// handler — routing, body limit, signature check, parsing, de-duplication
// and the hand-on callback — with a new message each time. Bodies and
// signatures are made before the timer starts.

func benchHook(b *testing.B, e *testEnv, path string, gen func(i int) ([]byte, map[string]string)) {
	type req struct {
		body []byte
		h    map[string]string
	}
	reqs := make([]req, b.N)
	for i := range reqs {
		reqs[i].body, reqs[i].h = gen(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if status, ans := e.post(b, path, reqs[i].body, reqs[i].h); status != http.StatusOK {
			b.Fatalf("status %d: %v", status, ans)
		}
	}
	b.StopTimer()
	if n := len(e.box.all()); n != b.N {
		b.Fatalf("handed on %d of %d", n, b.N)
	}
}

func BenchmarkTelegramWebhook(b *testing.B) {
	e := telegramEnv(b, noAPI(), "s3cret-token", Options{})
	benchHook(b, e, HookPath(tenant, agentName, "telegram"), func(i int) ([]byte, map[string]string) {
		return fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"from":{"id":7,"is_bot":false,"first_name":"A"},"chat":{"id":7,"type":"private"},"date":1700000000,"text":"hello %d"}}`, i+1, i+1, i),
			map[string]string{HeaderTelegramSecret: "s3cret-token"}
	})
}

func BenchmarkSlackWebhook(b *testing.B) {
	e := slackEnv(b, noAPI())
	now := time.Now()
	benchHook(b, e, HookPath(tenant, agentName, "slack"), func(i int) ([]byte, map[string]string) {
		body := fmt.Appendf(nil, `{"type":"event_callback","event_id":"Ev%d","event":{"type":"message","channel":"D1","user":"U1","text":"hello %d","ts":"1700000000.%06d","channel_type":"im"}}`, i, i, i)
		return body, slackSign(slackSecret, now, body)
	})
}

func BenchmarkFeishuWebhookEncrypted(b *testing.B) {
	e := feishuEnv(b, noAPI(), fsEncryptKey)
	benchHook(b, e, HookPath(tenant, agentName, "lark"), func(i int) ([]byte, map[string]string) {
		return feishuSigned(fsEncryptKey, fmt.Appendf(nil, `{"schema":"2.0","header":{"event_id":"e%d","event_type":"im.message.receive_v1","token":"xxxxxx"},"event":{"sender":{"sender_id":{"open_id":"ou_1"},"sender_type":"user"},"message":{"message_id":"om_%d","chat_id":"oc_1","message_type":"text","content":"{\"text\":\"hello\"}","create_time":"1700000000000"}}}`, i, i))
	})
}

func BenchmarkGenericWebhook(b *testing.B) {
	e := newEnv(b, Options{}, []picobotv1alpha1.Channel{ch(TypeWebhook, "tickets", "wh")},
		map[string]map[string]string{"wh": {KeyWebhookSigningSecret: hookSecret}})
	benchHook(b, e, HookPath(tenant, agentName, "tickets"), func(i int) ([]byte, map[string]string) {
		body := fmt.Appendf(nil, `{"chat_id":"c1","message_id":"m%d","text":"hello"}`, i)
		return body, picoSign(hookSecret, e.clock.Now(), body)
	})
}
