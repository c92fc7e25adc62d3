//go:build linux

package execserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// BenchmarkEchoHi is the added latency of running a short program
// (`bash -c "echo hi"`, what a bash tool call costs beyond the tool) through
// the sandbox container's exec server over its Unix socket, against a plain
// process group of the runtime and against the runtime's own re-executed
// sandbox launcher (embedded mode). Reports p50/p99. Target: under 5 ms added
// over the socket.
func BenchmarkEchoHi(b *testing.B) {
	p := newPod(b)
	env := p.env()
	run := map[string]func() error{
		"plain": func() error {
			cmd := exec.Command("bash", "-c", "echo hi")
			cmd.Dir, cmd.Env = p.ws, env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			return cmd.Run()
		},
		"exec-server": func() error {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			defer func() { _ = r.Close() }()
			proc, err := p.client.Start(execserver.Request{Workspace: p.ws, Env: env, Argv: []string{"bash", "-c", "echo hi"}}, nil, w, w)
			_ = w.Close()
			if err != nil {
				return err
			}
			buf := make([]byte, 64)
			for {
				if _, err := r.Read(buf); err != nil {
					break
				}
			}
			_, _, err = proc.Wait()
			proc.Close()
			return err
		},
		"launcher": func() error {
			cmd, err := sandbox.Command(sandbox.Spec{Workspace: p.ws, Env: env}, "bash", "-c", "echo hi")
			if err != nil {
				return err
			}
			err = cmd.Run()
			cmd.Exit()
			return err
		},
	}
	// paired runs plain and exec-server alternately, so both see the same
	// load, and reports each one's percentiles and those of the difference
	// (what the server adds to one call): on a shared machine the separate
	// runs drift with the load.
	b.Run("paired", func(b *testing.B) {
		var plain, server, added []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if err := run["plain"](); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := run["exec-server"](); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			plain, server, added = append(plain, t1.Sub(t0)), append(server, t2.Sub(t1)), append(added, t2.Sub(t1)-t1.Sub(t0))
		}
		for _, m := range []struct {
			name string
			lat  []time.Duration
		}{{"plain", plain}, {"server", server}, {"added", added}} {
			slices.Sort(m.lat)
			b.ReportMetric(float64(m.lat[len(m.lat)/2].Microseconds())/1000, m.name+"-p50-ms")
			b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Microseconds())/1000, m.name+"-p99-ms")
		}
	})
	for _, name := range []string{"plain", "exec-server", "launcher"} {
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

// BenchmarkFileRead is the added latency of a file_read call (a 4 kB file
// of 100 lines) run by the sandbox container's exec server (one connection,
// a confined thread, the result back over the socket) against the same tool
// in the runtime's process, run alternately so both see the same load.
// Reports p50/p99 of each and of the difference.
func BenchmarkFileRead(b *testing.B) {
	p := newPod(b)
	must(b, os.WriteFile(filepath.Join(p.ws, "page.txt"), []byte(strings.Repeat(strings.Repeat("x", 40)+"\n", 100)), 0o644))
	local := fs.NewFileRead()
	remote, ok := p.fileTools(b).Get("file_read")
	if !ok {
		b.Fatal("no file_read")
	}
	args := json.RawMessage(`{"path":"page.txt"}`)
	env := tool.Env{Workspace: p.ws}
	call := func(t tool.Tool) error {
		res, err := t.Run(context.Background(), env, args)
		if err == nil && res.IsError {
			err = errors.New(res.Content)
		}
		return err
	}
	var direct, sandboxed, added []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := call(local); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := call(remote); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		direct, sandboxed, added = append(direct, t1.Sub(t0)), append(sandboxed, t2.Sub(t1)), append(added, t2.Sub(t1)-t1.Sub(t0))
	}
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"direct", direct}, {"sandbox", sandboxed}, {"added", added}} {
		slices.Sort(m.lat)
		b.ReportMetric(float64(m.lat[len(m.lat)/2].Microseconds())/1000, m.name+"-p50-ms")
		b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Microseconds())/1000, m.name+"-p99-ms")
	}
}
