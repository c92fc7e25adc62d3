// Package session owns conversations: session ids and dialogs, restoring
// history from the store, the three-phase processing of a turn around the
// stateless agent loop, the lease that makes one runtime the owner of a
// session, and slash commands.
package session

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DefaultDialog is the dialog a chat talks to before it creates another.
const DefaultDialog = "default"

// ID is a session id: `<channel>:<chat_id>:<dialog_id>`. Chat ids may contain
// ':' (some platforms use them), channel and dialog ids may not, so parsing
// takes the channel up to the first ':' and the dialog after the last.
type ID struct {
	Channel, ChatID, DialogID string
}

// ParseID parses a session id.
func ParseID(s string) (ID, error) {
	first, last := strings.IndexByte(s, ':'), strings.LastIndexByte(s, ':')
	if first <= 0 || last == first || last == len(s)-1 || last-first < 2 {
		return ID{}, fmt.Errorf("invalid session id %q: want <channel>:<chat_id>:<dialog_id>", s)
	}
	id := ID{Channel: s[:first], ChatID: s[first+1 : last], DialogID: s[last+1:]}
	return id, id.Validate()
}

// Validate checks the parts of an id.
func (id ID) Validate() error {
	switch {
	case id.Channel == "" || id.ChatID == "" || id.DialogID == "":
		return errors.New("invalid session id: channel, chat id and dialog id are all required")
	case strings.ContainsRune(id.Channel, ':'):
		return fmt.Errorf("invalid channel %q: must not contain ':'", id.Channel)
	case strings.ContainsRune(id.DialogID, ':'):
		return fmt.Errorf("invalid dialog id %q: must not contain ':'", id.DialogID)
	case strings.ContainsAny(id.Channel+id.ChatID+id.DialogID, "\x00\n\r"):
		return errors.New("invalid session id: control characters")
	case len(id.Channel)+len(id.ChatID)+len(id.DialogID) > 500:
		return errors.New("invalid session id: longer than 500 bytes")
	}
	return nil
}

func (id ID) String() string { return id.Channel + ":" + id.ChatID + ":" + id.DialogID }

// ChatScope is `<channel>:<chat_id>`: the dialogs of one chat share it.
func (id ID) ChatScope() string { return id.Channel + ":" + id.ChatID }

var dialogEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewDialogID returns a short random dialog id such as "d_k3x9qa2m".
func NewDialogID() string {
	var b [5]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "d_" + dialogEncoding.EncodeToString(b[:])
}

// unsafeName matches what a workspace folder name does not keep of an id.
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// WorkspaceName is the folder name of a session's workspace: readable (the
// id with every run of characters other than letters, digits, '.', '_' and
// '-' replaced by '_', at most 100 bytes) and unique (a hash of the whole id
// follows, so ids that read alike, or differ only in case on a
// case-insensitive file system, never share a folder).
func WorkspaceName(id ID) string {
	s := id.String()
	sum := sha256.Sum256([]byte(s))
	readable := unsafeName.ReplaceAllString(s, "_")
	if len(readable) > 100 {
		readable = readable[:100]
	}
	return readable + "-" + hex.EncodeToString(sum[:8])
}
