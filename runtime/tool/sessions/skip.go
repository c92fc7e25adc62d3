package sessions

// The replies that end an agent-to-agent exchange early (OpenClaw's tokens):
// an agent answering exactly one of them says it has nothing to add.
const (
	// ReplySkip, as a reply in sessions_send's ping-pong, ends it.
	ReplySkip = "REPLY_SKIP"
	// AnnounceSkip, as the reply of an announce step (sessions_send's, or
	// the continuation turn of a sessions_spawn run), keeps it silent.
	AnnounceSkip = "ANNOUNCE_SKIP"
)
