package store

import "time"

// SignalDelivery says when a signal reaches the parent session.
type SignalDelivery string

// Signal deliveries.
const (
	// SignalQueue waits for the parent session's next turn.
	SignalQueue SignalDelivery = "queue"
	// SignalSteer joins the parent's running turn at its next safe boundary
	// (between two tool batches), or its next turn when none runs.
	SignalSteer SignalDelivery = "steer"
)

// SignalState is where a signal is in its life.
type SignalState string

// Signal states.
const (
	SignalPending    SignalState = "pending"
	SignalConsumed   SignalState = "consumed"
	SignalSuperseded SignalState = "superseded"
)

// AgentSignal is a structured internal message a background run sends to
// the session that started it (emit_signal).
type AgentSignal struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	RunID  string `json:"run_id"`
	// SessionID is the parent session the signal goes to.
	SessionID string         `json:"session_id"`
	Delivery  SignalDelivery `json:"delivery"`
	// Kind is the run's label of the signal (progress, finding, question...).
	Kind string `json:"kind,omitempty"`
	Body string `json:"body"`
	// State defaults to pending on create.
	State     SignalState `json:"state"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// AgentSignalFilter selects signals; empty fields match all.
type AgentSignalFilter struct {
	SessionID string
	RunID     string
	Delivery  SignalDelivery
	State     SignalState
	// Limit caps the result; 0 means DefaultListLimit.
	Limit int
}

// Validate checks a signal for CreateAgentSignal.
func (s AgentSignal) Validate() error {
	if err := required("id", s.ID, "run_id", s.RunID, "session_id", s.SessionID, "body", s.Body); err != nil {
		return err
	}
	if err := oneOf("delivery", s.Delivery, SignalQueue, SignalSteer); err != nil {
		return err
	}
	if s.State != "" {
		if err := oneOf("state", s.State, SignalPending, SignalConsumed, SignalSuperseded); err != nil {
			return err
		}
	}
	return noNUL("kind", s.Kind, "body", s.Body)
}
