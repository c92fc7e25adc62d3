package session

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine running. The
// session tests use no third-party background goroutines, so nothing is
// ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
