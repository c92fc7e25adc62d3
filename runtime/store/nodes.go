package store

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// NodeState is where a paired device stands: a new node waits (pending)
// until its tenant's user approves or rejects it; an approved one can be
// revoked later. Only approved nodes take calls.
type NodeState string

// Node states.
const (
	NodePending  NodeState = "pending"
	NodeApproved NodeState = "approved"
	NodeRejected NodeState = "rejected"
	NodeRevoked  NodeState = "revoked"
)

// Bounds of a node record.
const (
	// MaxNodeField bounds a node's name, platform and version.
	MaxNodeField = 200
	// MaxNodeCapabilities bounds the capabilities a node reports.
	MaxNodeCapabilities = 32
	// MaxListNodes caps ListNodes.
	MaxListNodes = 500
)

// nodeID is the form of a node id: the node picks it (and keeps it in its
// state folder), so it is checked as any client input is.
var nodeID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Node is a device paired with a tenant (`picobot node`): what it said of
// itself at its last hello, and whether its user approved it.
type Node struct {
	// ID is the node's own id (1–64 of A-Z a-z 0-9 _ -).
	ID       string `json:"id"`
	Name     string `json:"name"`
	Platform string `json:"platform"`
	Version  string `json:"version"`
	// Capabilities are the actions the node offers (run, notify,
	// screen_record, ...), as it reported them.
	Capabilities []string  `json:"capabilities"`
	State        NodeState `json:"state"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	LastSeenAt   time.Time `json:"last_seen_at"`
}

// ValidNodeState reports whether s is one of the node states.
func ValidNodeState(s NodeState) bool {
	switch s {
	case NodePending, NodeApproved, NodeRejected, NodeRevoked:
		return true
	}
	return false
}

// ValidateNodeID checks a node id.
func ValidateNodeID(id string) error {
	if !nodeID.MatchString(id) {
		return fmt.Errorf("%w: node id %q is not 1-64 letters, digits, '_' or '-' (starting with a letter or digit)", ErrInvalid, id)
	}
	return nil
}

// ValidateNode checks a node's hello before it is stored.
func ValidateNode(n Node) error {
	if err := ValidateNodeID(n.ID); err != nil {
		return err
	}
	if len(n.Capabilities) > MaxNodeCapabilities {
		return fmt.Errorf("%w: node %q reports %d capabilities, more than %d", ErrInvalid, n.ID, len(n.Capabilities), MaxNodeCapabilities)
	}
	fields := map[string]string{"name": n.Name, "platform": n.Platform, "version": n.Version}
	for i, c := range n.Capabilities {
		fields[fmt.Sprintf("capability %d", i)] = c
	}
	for name, v := range fields {
		if len(v) > MaxNodeField {
			return fmt.Errorf("%w: node %s has %d bytes, more than %d", ErrInvalid, name, len(v), MaxNodeField)
		}
		if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return fmt.Errorf("%w: node %s holds a control character", ErrInvalid, name)
		}
	}
	return nil
}
