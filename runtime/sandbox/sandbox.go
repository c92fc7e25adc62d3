// Package sandbox starts the programs the model's tools run (bash, exec, pty,
// MCP stdio servers) so that the kernel, not a filter of ours, keeps them away
// from the runtime's secrets and from other sessions.
//
// A program is started through the runtime's own executable (re-executed as
// "picobot-sandbox"), which sets up the sandbox and then replaces itself with
// the program:
//
//   - new user, PID and mount namespaces where Linux allows: the program is
//     PID 1 of its own namespace, sees a /proc of its own (not the runtime's
//     /proc/<pid>/environ), and every process it starts dies when it ends or
//     when the runtime dies (PR_SET_PDEATHSIG, then the kernel tears the
//     namespace down); /tmp is the session's own folder;
//   - Landlock: the workspace read-write, system folders read-only, nothing
//     else (no state folder, no agent manifests, no home folder, no other
//     session); signals and abstract Unix sockets only within the sandbox;
//     and, as Landlock also guards ptrace, no reading of another process's
//     memory or environment even without a PID namespace;
//   - the network (Landlock ABI 4+ and a seccomp filter, network_linux.go):
//     TCP connections only to ports 53, 80, 443 and the Agent's
//     (spec.tools.network.allowedPorts), so not to the store, bus, blob
//     server or gateway the runtime reaches on the same host or pod;
//   - no capabilities and no_new_privs (set-user-ID programs gain nothing);
//   - an environment built from an allowlist (Env), never the runtime's.
//
// Where the kernel refuses a layer, the others still apply and Probe says
// which one is missing (picobot health and /health show it).
//
// In cluster mode the programs (MCP stdio servers included) run in the
// session pod's sandbox container instead (package execserver), which forks
// each one from a thread confined with the same Landlock and capability
// layers (ConfineThread), and runs the file tools on such a thread too.
package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/picobot/picobot/runtime/health"
)

// argv0 marks a re-executed runtime binary as the sandbox launcher.
const argv0 = "picobot-sandbox"

// Spec is where and how one program runs.
type Spec struct {
	// Workspace is the session's folder: the working directory, HOME, and
	// the only place the program may write (besides ReadWrite).
	Workspace string `json:"workspace"`
	// ReadOnly and ReadWrite are further folders or files the Agent opted in
	// to (spec.tools.fs.allowedPaths).
	ReadOnly  []string `json:"readOnly,omitempty"`
	ReadWrite []string `json:"readWrite,omitempty"`
	// AllowedPorts are TCP ports the program may connect to besides
	// defaultPorts (spec.tools.network.allowedPorts).
	AllowedPorts []uint16 `json:"allowedPorts,omitempty"`
	// Env is the program's whole environment (see Env).
	Env []string `json:"-"`
}

// defaultPorts are the TCP ports every program may connect to: DNS over
// TCP, and the web (pages, APIs, package downloads). The runtime's store,
// bus and blob servers, the gateway and the browser's DevTools listen on
// none of them by default (an S3 endpoint on 443 excepted, for which the
// sandbox holds no credential).
var defaultPorts = []uint16{53, 80, 443}

// connectPorts are defaultPorts and the spec's own, sorted, each once.
func (s Spec) connectPorts() []uint16 {
	ports := append(slices.Clone(defaultPorts), s.AllowedPorts...)
	slices.Sort(ports)
	return slices.Compact(ports)
}

// childSpec is what the launcher is told, as its first argument.
type childSpec struct {
	Spec
	// Namespaces says the launcher runs in new user, PID and mount
	// namespaces and should mount its own /proc and /tmp.
	Namespaces bool `json:"namespaces,omitempty"`
	// Probe makes the launcher report what it could set up (a Report as
	// JSON on stdout) instead of running a program.
	Probe bool `json:"probe,omitempty"`
	// Self runs the runtime's own executable (argv[0] is then only the
	// program's name) and replaces the launcher with it even in
	// namespaces, where it becomes the namespace's init: a warm sandbox's
	// exec server (SelfCommand), which reaps what it starts itself.
	Self bool `json:"self,omitempty"`
}

// Report says which layers of the sandbox this machine gives.
type Report struct {
	// Namespaces: new user, PID and mount namespaces.
	Namespaces bool `json:"namespaces"`
	// PrivateProc: a /proc of the sandbox's own PID namespace.
	PrivateProc bool `json:"privateProc"`
	// LandlockABI is the kernel's Landlock ABI version, 0 when it has none.
	LandlockABI int `json:"landlockABI"`
	// Network: TCP connections only to allowed ports (Landlock ABI 4+ and
	// a seccomp filter on the sockets Landlock does not see).
	Network bool `json:"network"`
	// Errors says why a layer is missing, by layer.
	Errors map[string]string `json:"errors,omitempty"`
}

// Missing lists the layers the sandbox runs without, with the reason, for
// health checks; empty when every layer is in place.
func (r Report) Missing() []string {
	var out []string
	add := func(layer string, ok bool) {
		if !ok {
			msg := layer
			if why := r.Errors[layer]; why != "" {
				msg += " (" + why + ")"
			}
			out = append(out, msg)
		}
	}
	add("namespaces", r.Namespaces)
	add("private /proc", r.PrivateProc)
	add("landlock", r.LandlockABI > 0)
	add("network", r.Network)
	return out
}

// portList is "53, 80 and 443".
func portList(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// String is one line for logs and health output.
func (r Report) String() string {
	layers := []string{"allowlisted environment", "no capabilities"}
	if r.Namespaces {
		layers = append(layers, "user/PID/mount namespaces")
	}
	if r.PrivateProc {
		layers = append(layers, "private /proc")
	}
	if r.LandlockABI > 0 {
		layers = append(layers, fmt.Sprintf("Landlock ABI %d", r.LandlockABI))
	}
	if r.Network {
		layers = append(layers, "TCP ports "+portList(defaultPorts)+" and the Agent's only")
	}
	s := strings.Join(layers, ", ")
	if m := r.Missing(); len(m) > 0 {
		s += "; missing: " + strings.Join(m, "; ")
	}
	return s
}

var (
	probeOnce   sync.Once
	probeReport Report
)

// Probe runs the launcher once (per process) in probe mode and reports what
// it could set up. Start uses the result: namespaces are asked for only
// where the probe got them.
func Probe() Report {
	probeOnce.Do(func() { probeReport = probe() })
	return probeReport
}

// baseEnv are the variables a program inherits from the runtime, the
// allowlist: nothing else of the runtime's environment reaches it.
var baseEnv = []string{"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ"}

// defaultPath is PATH when the runtime has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env builds a program's environment: the allowlisted variables from
// environ (the runtime's), HOME, PWD and TMPDIR set for the workspace, then
// pass (names the operator let through on purpose, taken from environ) and
// extra ("NAME=value", what the Agent declares), later ones winning.
func Env(environ []string, workspace string, pass []string, extra ...string) []string {
	from := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			from[k] = v
		}
	}
	vars := map[string]string{}
	for _, k := range baseEnv {
		if v, ok := from[k]; ok {
			vars[k] = v
		}
	}
	if vars["PATH"] == "" {
		vars["PATH"] = defaultPath
	}
	if workspace != "" {
		vars["HOME"], vars["PWD"], vars["TMPDIR"] = workspace, workspace, TmpDir(workspace)
	}
	for _, k := range pass {
		if v, ok := from[k]; ok {
			vars[k] = v
		}
	}
	for _, kv := range extra {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			vars[k] = v
		}
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// cutName splits "NAME=value".
func cutName(kv string) (name, value string, ok bool) { return strings.Cut(kv, "=") }

// TmpDir is a workspace's temporary folder: TMPDIR, and /tmp inside the
// sandbox where it has a mount namespace.
func TmpDir(workspace string) string { return filepath.Join(workspace, ".tmp") }

// Cmd is a sandboxed command: the exec.Cmd starts the launcher, which runs
// the program.
type Cmd struct {
	*exec.Cmd
	statusR, statusW *os.File
	once             sync.Once
	status           syscall.WaitStatus
	reported         bool
}

// Exit says how the program ended, once Wait has returned (or Start
// failed), and releases the status pipe: the status the launcher reported
// when it ran the program as its namespace's init, else the process's own
// (the launcher had replaced itself with the program). ok is false when the
// process left no status (it never started).
func (c *Cmd) Exit() (ws syscall.WaitStatus, ok bool) {
	c.once.Do(func() {
		if c.statusW != nil {
			_ = c.statusW.Close()
		}
		if c.statusR != nil {
			var b [4]byte
			if _, err := io.ReadFull(c.statusR, b[:]); err == nil {
				c.status, c.reported = syscall.WaitStatus(binary.LittleEndian.Uint32(b[:])), true
			}
			_ = c.statusR.Close()
		}
	})
	if c.reported {
		return c.status, true
	}
	if c.ProcessState == nil {
		return 0, false
	}
	ws, ok = c.ProcessState.Sys().(syscall.WaitStatus)
	return ws, ok
}

// encode is the launcher's first argument.
func (c childSpec) encode() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("failed to encode sandbox spec: %w", err)
	}
	return string(b), nil
}

// prepare checks the workspace and creates its temporary folder.
func (s Spec) prepare() error {
	if s.Workspace == "" {
		return nil
	}
	fi, err := os.Stat(s.Workspace)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("failed to use workspace %q: not a directory", s.Workspace)
	}
	if err := os.MkdirAll(TmpDir(s.Workspace), 0o700); err != nil {
		return fmt.Errorf("failed to create the workspace's temporary folder: %w", err)
	}
	return nil
}

// Checks are the health checks of the sandbox, one per layer (named for
// the layer; a flat list prefixes "tool sandbox: "): a missing
// layer degrades isolation (the others still apply), so it fails its check
// with the fix.
func (r Report) Checks() []health.Check {
	msg := func(layer, ok string) string {
		if why := r.Errors[layer]; why != "" {
			return why
		}
		return ok
	}
	nsFix := "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0; " +
		"on Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0), or run where seccomp permits clone(CLONE_NEWUSER)"
	cs := []health.Check{
		{Name: "environment", OK: true, Message: "programs get an allowlisted environment, never the runtime's"},
		{Name: "namespaces", OK: r.Namespaces, Message: msg("namespaces", "user, PID and mount namespaces"), Fix: nsFix},
		{Name: "private /proc", OK: r.PrivateProc, Message: msg("private /proc", "the runtime's processes are not in the programs' /proc"),
			Fix: "needs the namespaces layer and an unmasked /proc"},
		{Name: "Landlock", OK: r.LandlockABI > 0, Message: msg("landlock", fmt.Sprintf("ABI %d: workspace read-write, system folders read-only", r.LandlockABI)),
			Fix: "use a kernel 5.13+ with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y, \"landlock\" in the lsm= boot parameter)"},
		{Name: "network", OK: r.Network, Message: msg("network", "programs connect over TCP only to ports "+portList(defaultPorts)+
			" and those the Agent allows (spec.tools.network.allowedPorts), not to the store, bus, blob server or gateway"),
			Fix: "use a kernel 6.7+ with Landlock (ABI 4 has network rules); until then programs reach every TCP port the runtime reaches"},
	}
	for i := range cs {
		if cs[i].OK {
			cs[i].Fix = ""
		}
	}
	return cs
}
