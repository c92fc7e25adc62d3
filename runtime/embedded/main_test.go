package embedded

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: chat
// goroutines, channel pollers and the scheduler must all end with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
