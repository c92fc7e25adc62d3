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
	// The script picks a free loopback port itself and retries if it loses a
	// race for it, which FreePort alone could not.
	out, err := hackScript("postgres.sh", "start")
	if err != nil {
		return "", nil, err
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 2 {
		return "", nil, fmt.Errorf("failed to parse hack/postgres.sh output %q: want a DSN and a folder", out)
	}
	dsn, dir := strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1])
	stop = func() {
		if _, err := hackScript("postgres.sh", "stop", dir); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop PostgreSQL in %s: %v\n", dir, err)
		}
	}
	return dsn, stop, nil
}
