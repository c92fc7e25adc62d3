//go:build linux

package sandbox

import (
	"errors"
	"runtime"
	"testing"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// BenchmarkNetworkLayer is what the network layer adds to confining a
// thread (the launcher's and the exec server's per program): a TCP rule per
// allowed port in the Landlock ruleset and the socket filter. Each
// iteration confines a fresh OS thread (Go ends it with its locked
// goroutine); "thread" is that thread alone, "filter" adds the socket
// filter, "network" a Landlock ruleset of the TCP rules and the filter (the
// ruleset's creation and enforcement restrict pays for the filesystem rules
// anyway).
func BenchmarkNetworkLayer(b *testing.B) {
	if !Probe().Network {
		b.Skipf("this kernel gives no network layer: %s", Probe())
	}
	for _, name := range []string{"thread", "filter", "network"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				errc := make(chan error, 1)
				go func() {
					runtime.LockOSThread() // never unlocked: the confined thread ends with the goroutine
					switch name {
					case "thread":
						errc <- nil
					case "filter":
						errc <- errors.Join(unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), filterSockets())
					default:
						errc <- confineNetwork()
					}
				}()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// confineNetwork applies only the network layer to this thread.
func confineNetwork() error {
	cfg := landlock.Config{HandledAccessNet: netHandled}
	fd, flags, err := cfg.NewRulesetFD(netRules(Spec{})...)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if err := llsyscall.LandlockRestrictSelf(fd, flags); err != nil {
		return err
	}
	return filterSockets()
}
