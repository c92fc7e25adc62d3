package services

import (
	"fmt"
	"os"
	"strings"
)

// PostgresURLEnv names a PostgreSQL server to use instead of starting one. Its
// role must be able to create roles and databases: tests make a database per
// test and connect as a separate, unprivileged role so row-level security
// applies.
const PostgresURLEnv = "PICOBOT_TEST_POSTGRES_URL"

// Postgres returns the DSN of a PostgreSQL server for tests and a function that
// stops it. With PICOBOT_TEST_POSTGRES_URL set it uses that server and stop does
// nothing; otherwise hack/postgres.sh starts a throwaway cluster (installing
// Debian's postgresql when missing), which stop removes.
func Postgres() (dsn string, stop func(), err error) {
	if url := os.Getenv(PostgresURLEnv); url != "" {
		return url, func() {}, nil
	}
	s, err := StartPostgres()
	if err != nil {
		return "", nil, err
	}
	stop = func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return s.DSN, stop, nil
}

// PostgresServer is a throwaway PostgreSQL cluster of this process, for tests
// that control its life: a restart on the same port and data (Halt, then
// Resume), which a configured shared server cannot offer.
type PostgresServer struct {
	// DSN reaches the "picobot" database as the superuser postgres.
	DSN string
	// Dir holds the cluster's data, socket and log.
	Dir string
}

// StartPostgres starts a cluster on a free port through hack/postgres.sh.
func StartPostgres() (*PostgresServer, error) {
	// The script picks a free loopback port itself and retries if it loses a
	// race for it, which FreePort alone could not.
	out, err := hackScript("postgres.sh", "start")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("failed to parse hack/postgres.sh output %q: want a DSN and a folder", out)
	}
	return &PostgresServer{DSN: strings.TrimSpace(lines[0]), Dir: strings.TrimSpace(lines[1])}, nil
}

// Halt stops the server as `pg_ctl restart` does (a fast shutdown: clients
// are disconnected, committed work is kept) and returns once it is down.
func (s *PostgresServer) Halt() error {
	if _, err := hackScript("postgres.sh", "halt", s.Dir); err != nil {
		return fmt.Errorf("failed to halt PostgreSQL in %s: %w", s.Dir, err)
	}
	return nil
}

// Resume starts a halted server again on the same port and data, returning
// once it accepts connections; a running server is left alone.
func (s *PostgresServer) Resume() error {
	if _, err := hackScript("postgres.sh", "resume", s.Dir); err != nil {
		return fmt.Errorf("failed to resume PostgreSQL in %s: %w", s.Dir, err)
	}
	return nil
}

// Stop stops the server and removes its folder.
func (s *PostgresServer) Stop() error {
	if _, err := hackScript("postgres.sh", "stop", s.Dir); err != nil {
		return fmt.Errorf("failed to stop PostgreSQL in %s: %w", s.Dir, err)
	}
	return nil
}
