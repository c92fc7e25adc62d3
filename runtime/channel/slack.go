package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// Slack uses github.com/slack-go/slack: request signing (v0 HMAC with the
// five-minute timestamp window), Events API types, chat.postMessage and the
// external file upload flow (files.getUploadURLExternal, upload,
// files.completeUploadExternal).

const (
	slackAPI = "https://slack.com/api/"
	// slackTextLimit stays under chat.postMessage's 40,000 character cap.
	slackTextLimit = 39000
	// HeaderSlackRetryNum marks Slack's redelivery of an event.
	HeaderSlackRetryNum = "X-Slack-Retry-Num"
)

// slackTransient are Slack error names worth retrying.
var slackTransient = map[string]bool{"ratelimited": true, "internal_error": true, "fatal_error": true,
	"service_unavailable": true, "request_timeout": true}

type slackChannel struct {
	buildEnv
	signingSecret string
	api           *slack.Client
}

func newSlack(env buildEnv, base, botToken, signingSecret string) hosted {
	if base == "" {
		base = slackAPI
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	s := &slackChannel{buildEnv: env, signingSecret: signingSecret,
		api: slack.New(botToken, slack.OptionAPIURL(base), slack.OptionHTTPClient(env.hc))}
	return hosted{Channel: s, recv: s}
}

func (s *slackChannel) Name() string                      { return s.name }
func (s *slackChannel) Type() picobotv1alpha1.ChannelType { return TypeSlack }

// slackEnvelope is the outer Events API request, read before slackevents
// parses the inner event, so unknown event types can be acknowledged.
type slackEnvelope struct {
	Type           string `json:"type"`
	Challenge      string `json:"challenge"`
	EventID        string `json:"event_id"`
	Authorizations []struct {
		UserID string `json:"user_id"`
		IsBot  bool   `json:"is_bot"`
	} `json:"authorizations"`
	Event *struct {
		Type string `json:"type"`
	} `json:"event"`
}

func (s *slackChannel) receive(r *http.Request, body []byte) (hookReply, error) {
	v, err := slack.NewSecretsVerifier(r.Header, s.signingSecret)
	switch {
	case errors.Is(err, slack.ErrExpiredTimestamp):
		return hookReply{}, refuse(http.StatusUnauthorized, CodeStaleTimestamp, "request timestamp is more than 5 minutes off: refused as a replay")
	case errors.Is(err, slack.ErrMissingHeaders):
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "missing X-Slack-Signature or X-Slack-Request-Timestamp header")
	case err != nil:
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "invalid signature headers: %v", err)
	}
	_, _ = v.Write(body)
	if err := v.Ensure(); err != nil {
		return hookReply{}, refuse(http.StatusUnauthorized, CodeBadSignature, "wrong X-Slack-Signature")
	}
	return s.parse(body)
}

// parse reads a verified Events API request.
func (s *slackChannel) parse(body []byte) (hookReply, error) {
	var env slackEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return hookReply{}, refuse(http.StatusBadRequest, CodeMalformed, "event is not valid JSON: %v", err)
	}
	switch env.Type {
	case slackevents.URLVerification:
		return hookReply{body: map[string]string{"challenge": env.Challenge}}, nil
	case slackevents.CallbackEvent:
	default:
		return hookReply{}, nil // app_rate_limited and future envelope types
	}
	if env.EventID == "" || env.Event == nil {
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "event_callback lacks event_id or event")
	}
	if env.Event.Type != string(slackevents.Message) && env.Event.Type != string(slackevents.AppMention) {
		return hookReply{}, nil
	}
	parsed, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
	if err != nil {
		return hookReply{}, refuse(http.StatusBadRequest, CodeMalformed, "%s event is malformed: %v", env.Event.Type, err)
	}
	var (
		user, bot, subtype, channel, ts, text string
		files                                 []slack.File
	)
	switch e := parsed.InnerEvent.Data.(type) {
	case *slackevents.MessageEvent:
		user, bot, subtype, channel, ts, text = e.User, e.BotID, e.SubType, e.Channel, e.TimeStamp, e.Text
		if e.Message != nil {
			files = e.Message.Files
		}
	case *slackevents.AppMentionEvent:
		user, bot, channel, ts, text, files = e.User, e.BotID, e.Channel, e.TimeStamp, e.Text, e.Files
	default:
		return hookReply{}, nil
	}
	// Only what people write: not bots (ourselves included), not edits,
	// deletions or joins.
	if bot != "" || user == "" || (subtype != "" && subtype != "file_share" && subtype != "thread_broadcast") {
		return hookReply{}, nil
	}
	for _, a := range env.Authorizations {
		if a.IsBot && a.UserID == user {
			return hookReply{}, nil
		}
	}
	if channel == "" || ts == "" {
		return hookReply{}, refuse(http.StatusBadRequest, CodeBadRequest, "message event lacks channel or ts")
	}
	in := Inbound{Channel: s.name, Type: TypeSlack, ChatID: channel, MessageID: ts, Sender: user, Text: text}
	if sec, err := strconv.ParseFloat(ts, 64); err == nil {
		in.Time = time.UnixMilli(int64(sec * 1000)).UTC()
	}
	for _, f := range files {
		in.Files = append(in.Files, File{Name: f.Name, MediaType: f.Mimetype, Size: int64(f.Size), Ref: f.URLPrivateDownload})
	}
	// A mention arrives as both an app_mention and a message event with the
	// same channel and ts: the message key makes the second a duplicate.
	return hookReply{events: []event{{keys: []string{"e:" + env.EventID, "m:" + channel + ":" + ts}, in: in}}}, nil
}

// Send implements Channel: chat.postMessage for the text (in chunks), then
// the external upload flow for each file.
func (s *slackChannel) Send(ctx context.Context, out Outbound) (Receipt, error) {
	var parts []part
	for _, c := range splitText(out.Text, slackTextLimit) {
		parts = append(parts, func(ctx context.Context) (string, error) {
			_, ts, err := s.api.PostMessageContext(ctx, out.ChatID, slack.MsgOptionText(c, false))
			return ts, slackError(err)
		})
	}
	for _, f := range out.Files {
		parts = append(parts, func(ctx context.Context) (string, error) {
			if len(f.Data) == 0 {
				return "", &SendError{Err: fmt.Errorf("file %q is empty", f.Name)}
			}
			sum, err := s.api.UploadFileContext(ctx, slack.UploadFileParameters{Reader: bytes.NewReader(f.Data),
				FileSize: len(f.Data), Filename: safeFileName(f.Name), Title: safeFileName(f.Name), Channel: out.ChatID})
			if err != nil {
				return "", slackError(err)
			}
			return sum.ID, nil
		})
	}
	if len(parts) == 0 {
		return Receipt{}, &SendError{Channel: s.name, Err: errors.New("nothing to send: the message has no text and no files")}
	}
	return sendParts(ctx, s.name, out.FromPart, parts)
}

// slackError classifies a slack-go error: rate limits (HTTP 429 with
// Retry-After, or {"ok":false,"error":"ratelimited"}), server errors and
// Slack's transient error names are worth retrying.
func slackError(err error) error {
	if err == nil {
		return nil
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &SendError{Transient: true, RetryAfter: rl.RetryAfter, Code: "ratelimited", Err: err}
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return statusError(sc.Code, http.Header{}, "", "slack: "+sc.Status)
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return &SendError{Transient: slackTransient[se.Err], Code: se.Err, Err: err}
	}
	if slackTransient[err.Error()] {
		return &SendError{Transient: true, Code: err.Error(), Err: err}
	}
	return err // network errors are classified by sendParts
}

// Fetch implements Fetcher: Ref is the file's url_private_download, which
// slack-go fetches with the bot token only from Slack hosts or the API URL.
func (s *slackChannel) Fetch(ctx context.Context, f File) ([]byte, error) {
	var buf limitedBuffer
	buf.limit = maxInboundFile
	if err := s.api.GetFileContext(ctx, f.Ref, &buf); err != nil {
		return nil, fmt.Errorf("failed to download slack file %q: %w", f.Name, err)
	}
	return buf.Bytes(), nil
}

// limitedBuffer refuses writes past limit bytes.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		return 0, fmt.Errorf("file exceeds the %d byte limit", b.limit)
	}
	return b.Buffer.Write(p)
}
