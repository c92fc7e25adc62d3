//go:build linux

package sandbox

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
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
