package redisbus_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/test/services"
)

// redisURL is the server shared by the package's tests, started once in
// TestMain; empty (with skipReason set) when Redis could not be started.
var redisURL, skipReason string

func TestMain(m *testing.M) {
	// The restart test makes go-redis log every failed dial of the outage; the
	// tests check outcomes, so its log is noise here.
	redis.SetLogger(discardLogger{})
	url, stop, err := services.Redis()
	if err != nil {
		reason, fatal := services.Unavailable("Redis", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipReason = reason
	} else {
		redisURL = url
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// needRedis skips a test when no Redis server is available (Unavailable
// already said so loudly, and made it fatal under CI).
func needRedis(t testing.TB) string {
	t.Helper()
	if redisURL == "" {
		t.Skip(skipReason)
	}
	return redisURL
}
