package services

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Redis returns the URL of a Redis server for tests: PICOBOT_TEST_REDIS_URL when
// set (stop is then a no-op), else a throwaway server started by hack/redis.sh
// (no persistence), which stop removes. Callers that get an error hand it to
// Unavailable.
func Redis() (url string, stop func(), err error) {
	if url := os.Getenv("PICOBOT_TEST_REDIS_URL"); url != "" {
		return url, func() {}, nil
	}
	s, err := StartRedis(false)
	if err != nil {
		return "", nil, err
	}
	return s.URL, func() { _ = s.Stop() }, nil
}

// RedisServer is a throwaway redis-server of this process, for tests that
// control its life: a crash (Kill) and a restart on the same port and data
// (Restart), which a configured shared server cannot offer.
type RedisServer struct {
	URL  string
	Port int
	// Dir holds the server's pid file, log and data.
	Dir string
	// AppendOnly servers keep an append-only file fsynced on every write, so a
	// restart brings back every acknowledged write.
	AppendOnly bool
}

// StartRedis starts a server on a free port through hack/redis.sh.
func StartRedis(appendOnly bool) (*RedisServer, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &RedisServer{Port: port, AppendOnly: appendOnly}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *RedisServer) start() error {
	args := []string{"start", "--port", strconv.Itoa(s.Port)}
	if s.Dir != "" {
		args = append(args, "--dir", s.Dir)
	}
	if s.AppendOnly {
		args = append(args, "--appendonly")
	}
	out, err := hackScript("redis.sh", args...)
	if err != nil {
		return fmt.Errorf("failed to start redis-server: %w", err)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 2 {
		return fmt.Errorf("failed to start redis-server: unexpected output %q", out)
	}
	s.URL = strings.TrimSpace(lines[len(lines)-2])
	s.Dir = strings.TrimSpace(lines[len(lines)-1])
	return nil
}

// Kill ends the server with SIGKILL, as a crash would (no shutdown, no final
// save), and returns once its port refuses connections.
func (s *RedisServer) Kill() error {
	raw, err := os.ReadFile(filepath.Join(s.Dir, "redis.pid"))
	if err != nil {
		return fmt.Errorf("failed to read redis-server pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("failed to parse redis-server pid %q: %w", raw, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("failed to kill redis-server %d: %w", pid, err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	for range 400 {
		if !accepts(addr) {
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return errors.New("failed to kill redis-server: its port still accepts connections")
}

func accepts(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err == nil {
		_ = conn.Close()
	}
	return err == nil
}

// Restart starts the server again on the same port and folder: with
// AppendOnly it loads the data the killed server had acknowledged.
func (s *RedisServer) Restart() error {
	return s.start()
}

// Stop stops the server and removes its folder.
func (s *RedisServer) Stop() error {
	if _, err := hackScript("redis.sh", "stop", s.Dir); err != nil {
		return fmt.Errorf("failed to stop redis-server: %w", err)
	}
	return nil
}

// OwnRedis starts a Redis server of tb's own (one it may kill, restart or
// lock down), stopped when tb ends. A server that cannot be started skips
// tb, or fails it under CI.
func OwnRedis(tb testing.TB, appendOnly bool) *RedisServer {
	tb.Helper()
	srv, err := StartRedis(appendOnly)
	if err != nil {
		reason, fatal := Unavailable("Redis (a server of the test's own)", err)
		if fatal {
			tb.Fatal(reason)
		}
		tb.Skip(reason)
	}
	tb.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			tb.Errorf("failed to stop the test's Redis: %v", err)
		}
	})
	return srv
}

// RedisFor returns the URL of a Redis server for one test or benchmark
// (Redis), stopped when it ends. A server that cannot be had fails it under
// CI and skips it, loudly, elsewhere (Unavailable).
func RedisFor(tb testing.TB) string {
	tb.Helper()
	url, stop, err := Redis()
	if err != nil {
		reason, fatal := Unavailable("Redis", err)
		if fatal {
			tb.Fatal(reason)
		}
		tb.Skip(reason)
	}
	tb.Cleanup(stop)
	return url
}
