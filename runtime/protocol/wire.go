package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
)

// WireVersion is the version of the bus messages this build writes. Readers
// accept every version up to it (a message without "v" is version 1, the
// format before it was versioned) and refuse newer ones with
// ErrUnknownVersion, so a gateway newer than a session pod during a rolling
// upgrade gets a clear error instead of a misread message. A change that old
// readers would misread bumps it; adding an optional field does not.
const WireVersion = 1

// Inbound is a queued user message on a chat stream (ChatStream): what the
// gateway (or a chat platform's channel) hands to the session runtime.
type Inbound struct {
	// V is the wire version (WireVersion when written by this build).
	V int `json:"v"`
	// ID is the message id, the idempotency key of the turn (the bus
	// message carries it too).
	ID      string `json:"id"`
	Channel string `json:"channel"`
	// ChatKey is the chat as sessions know it (ChatKey).
	ChatKey string `json:"chat_key"`
	Text    string `json:"text"`
}

// EncodeInbound returns the bus payload of a message, stamped with
// WireVersion.
func EncodeInbound(in Inbound) ([]byte, error) {
	in.V = WireVersion
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("failed to encode message %q: %w", in.ID, err)
	}
	return b, nil
}

// DecodeInbound reads a bus payload written by EncodeInbound of this or an
// earlier version.
func DecodeInbound(payload []byte) (Inbound, error) {
	var in Inbound
	if err := json.Unmarshal(payload, &in); err != nil {
		return Inbound{}, fmt.Errorf("malformed queued message: %w", err)
	}
	if err := CheckVersion(in.V); err != nil {
		return Inbound{}, err
	}
	if in.Channel == "" || in.ChatKey == "" {
		return Inbound{}, errors.New("malformed queued message: no channel or chat_key")
	}
	return in, nil
}

// CheckVersion accepts the wire versions this build reads (0, meaning before
// versioning, up to WireVersion).
func CheckVersion(v int) error {
	if v < 0 || v > WireVersion {
		return fmt.Errorf("%w %d (this build reads up to %d): the sender is newer; upgrade this component", ErrUnknownVersion, v, WireVersion)
	}
	return nil
}
