package fs_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that content_search leaves no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
