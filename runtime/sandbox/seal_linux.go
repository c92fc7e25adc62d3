//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sealFDEnv names the descriptor that carries a sealed environment.
const sealFDEnv = "PICOBOT_SEALED_ENV_FD"

// keptEnv stay in the initial environment block: they hold nothing secret
// and the process's own children (and ps) expect them.
var keptEnv = map[string]bool{"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "PWD": true,
	"LANG": true, "LANGUAGE": true, "LC_ALL": true, "LC_CTYPE": true, "LC_MESSAGES": true, "TERM": true, "TZ": true}

// SealEnvironment keeps the process's environment (model keys,
// PICOBOT_SECRET_*, database URLs) out of its initial environment block,
// which is what /proc/<pid>/environ shows to any process that may ptrace it.
// The first call re-executes the binary (same pid, same arguments) with
// only keptEnv in the block and everything else in a memfd; in the new
// image the second call reads the memfd into the process's environment
// (os.Getenv sees it as before; the block does not change) and closes it.
// On failure it changes nothing and says why: the process runs as before.
func SealEnvironment() error {
	if v, ok := os.LookupEnv(sealFDEnv); ok {
		return unseal(v)
	}
	var kept, sealed []string
	for _, kv := range os.Environ() {
		name, _, _ := cutName(kv)
		if keptEnv[name] {
			kept = append(kept, kv)
		} else {
			sealed = append(sealed, kv)
		}
	}
	if len(sealed) == 0 {
		return nil
	}
	fd, err := unix.MemfdCreate("picobot-env", 0)
	if err != nil {
		return fmt.Errorf("failed to create a memfd for the environment: %w", err)
	}
	f := os.NewFile(uintptr(fd), "picobot-env")
	if err := json.NewEncoder(f).Encode(sealed); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write the sealed environment: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to rewind the sealed environment: %w", err)
	}
	err = syscall.Exec(self, os.Args, append(kept, sealFDEnv+"="+strconv.Itoa(fd)))
	_ = f.Close()
	return fmt.Errorf("failed to re-execute with a sealed environment: %w", err)
}

func unseal(v string) error {
	_ = os.Unsetenv(sealFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%s=%q is not a descriptor", sealFDEnv, v)
	}
	f := os.NewFile(uintptr(fd), "picobot-env")
	defer func() { _ = f.Close() }()
	var sealed []string
	if err := json.NewDecoder(f).Decode(&sealed); err != nil {
		return fmt.Errorf("failed to read the sealed environment: %w", err)
	}
	for _, kv := range sealed {
		if name, value, ok := cutName(kv); ok {
			if err := os.Setenv(name, value); err != nil {
				return fmt.Errorf("failed to restore %s: %w", name, err)
			}
		}
	}
	return nil
}
