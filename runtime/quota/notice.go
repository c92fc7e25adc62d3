package quota

import (
	"context"
	"errors"
	"time"

	"github.com/picobot/picobot/runtime/protocol"
)

// Notices records notices given once (store.Store.ClaimNotice).
type Notices interface {
	ClaimNotice(ctx context.Context, key string, now, expires time.Time) (bool, error)
}

// limitNoticeEvery is how often a chat platform's chat is told that its
// messages are refused for the tenant's session or message cap.
const limitNoticeEvery = time.Minute

// ChatNotice reports whether a chat platform's chat (target
// "<channel>:<chat id>") is to be told err, the error its message ended
// with. A chat is told that the model budget is spent once per cap and
// period, and that the tenant is over its session or message cap once a
// minute, however many of its messages are refused and by whichever
// runtime: a chat room is not flooded with the same refusal. Every other
// error is told. When the store cannot be reached the chat is told (twice
// beats never). ctx carries the tenant. The web UI and REST clients get
// their error on every message; this is for chat platforms only.
func ChatNotice(ctx context.Context, n Notices, now time.Time, agent, target string, err error) bool {
	var ce *protocol.CodedError
	if !errors.As(err, &ce) {
		return true
	}
	var key string
	var until time.Time
	var ex *ExhaustedError
	switch {
	case ce.Code == protocol.CodeBudgetExhausted && errors.As(err, &ex):
		key, until = "budget/"+ex.Limit, ex.Until
	case ce.Code == protocol.CodeSessionLimit || ce.Code == protocol.CodeMessageLimit:
		key, until = ce.Code, now.Add(limitNoticeEvery)
	default:
		return true
	}
	first, cerr := n.ClaimNotice(ctx, key+"/"+agent+"/"+target, now, until)
	return cerr != nil || first
}
