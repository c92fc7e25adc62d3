//go:build linux

package sandbox

import (
	"errors"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// BenchmarkEchoHi is the added latency of the sandbox for one short program
// (`bash -c "echo hi"`, what a bash tool call costs beyond the tool): plain
// is a process group as the shell tools started programs before, sandbox
// adds the launcher with namespaces and Landlock, landlock-only the launcher
// without namespaces (a kernel that refuses them). Reports p50/p99.
// Target: under 10 ms added at p50.
func BenchmarkEchoHi(b *testing.B) {
	ws := b.TempDir()
	env := Env([]string{"PATH=" + defaultPath}, ws, nil)
	run := map[string]func() error{
		"plain": func() error {
			cmd := exec.Command("bash", "-c", "echo hi")
			cmd.Dir, cmd.Env = ws, env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			return cmd.Run()
		},
		"sandbox":       func() error { return runSandboxed(ws, env, true) },
		"landlock-only": func() error { return runSandboxed(ws, env, false) },
	}
	for _, name := range []string{"plain", "sandbox", "landlock-only"} {
		if name == "sandbox" && !Probe().Namespaces {
			continue
		}
		b.Run(name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := run[name](); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

func runSandboxed(ws string, env []string, ns bool) error {
	cmd, err := command(Spec{Workspace: ws, Env: env}, ns, "bash", "-c", "echo hi")
	if err != nil {
		return err
	}
	err = cmd.Run()
	cmd.Exit()
	return err
}

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
