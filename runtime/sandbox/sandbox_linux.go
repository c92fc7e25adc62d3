//go:build linux

package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// self is the running executable, whatever became of its path on disk (an
// upgrade that replaced the file still re-executes this version).
const self = "/proc/self/exe"

// Command returns a command that runs name with args in the sandbox spec
// describes. The caller sets its stdio, starts and waits for it, then calls
// Exit; the process is the leader of its own process group (a pty caller may
// switch that to Setsid) and gets SIGKILL when the runtime dies, and with it
// everything the program started.
func Command(spec Spec, name string, args ...string) (*Cmd, error) {
	return command(spec, Probe().Namespaces, name, args...)
}

// command is Command with the namespaces chosen (tests run without them
// too, as on a kernel that refuses them).
func command(spec Spec, ns bool, name string, args ...string) (*Cmd, error) {
	if err := spec.prepare(); err != nil {
		return nil, err
	}
	arg, err := childSpec{Spec: spec, Namespaces: ns}.encode()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("failed to create status pipe: %w", err)
	}
	cmd := &exec.Cmd{Path: self, Args: append([]string{argv0, arg, name}, args...), Env: spec.Env, Dir: spec.Workspace,
		ExtraFiles: []*os.File{w}}
	cmd.SysProcAttr = sysProcAttr(ns)
	return &Cmd{Cmd: cmd, statusR: r, statusW: w}, nil
}

// SelfCommand returns a command that runs the runtime's own executable,
// with name as its os.Args[0] and args after it, in the sandbox spec
// describes, as Command does, but as the init of the sandbox's namespaces
// (where it gets them) rather than its child: a warm sandbox's exec server
// (package warm), which reaps and kills what it starts itself. The
// launcher's Landlock rules (the exec server's own, beneath each program's)
// open the executable to read and run besides spec's paths. It fails where
// Probe found no namespaces: without a PID namespace to end with it, what
// the server started would outlive it.
func SelfCommand(spec Spec, name string, args ...string) (*Cmd, error) {
	if !Probe().Namespaces {
		return nil, errors.New("failed to start a warm sandbox: the kernel gives no namespaces")
	}
	// The launcher opens the rule's path itself: /proc/self/exe is then
	// its executable, this one, wherever it lies (even under a /tmp the
	// launcher's own /tmp hides, or replaced on disk since).
	spec.ReadOnly = append(slices.Clip(spec.ReadOnly), self)
	if err := spec.prepare(); err != nil {
		return nil, err
	}
	arg, err := childSpec{Spec: spec, Namespaces: true, Self: true}.encode()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: self, Args: append([]string{argv0, arg, name}, args...), Env: spec.Env, Dir: spec.Workspace}
	cmd.SysProcAttr = sysProcAttr(true)
	return &Cmd{Cmd: cmd}, nil
}

// statusFD is where the launcher finds the status pipe (the first of
// ExtraFiles).
const statusFD = 3

// sysProcAttr starts the launcher in its own process group, killed with
// the runtime, and in new namespaces when ns is set. The user namespace maps
// the runtime's own uid and gid only, so files keep their owners and the
// program holds no capability outside it.
func sysProcAttr(ns bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if ns {
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
	}
	return attr
}

// probe asks the launcher what it can set up, with namespaces first and,
// when the kernel refuses them, without.
func probe() Report {
	r, nsErr := runProbe(true)
	if nsErr == nil {
		return r
	}
	r, err := runProbe(false)
	if err != nil {
		return Report{Errors: map[string]string{"namespaces": nsErr.Error(), "landlock": err.Error()}}
	}
	if r.Errors == nil {
		r.Errors = map[string]string{}
	}
	r.Errors["namespaces"] = nsErr.Error()
	return r
}

func runProbe(ns bool) (Report, error) {
	arg, err := childSpec{Namespaces: ns, Probe: true}.encode()
	if err != nil {
		return Report{}, err
	}
	var stderr bytes.Buffer
	cmd := &exec.Cmd{Path: self, Args: []string{argv0, arg}, Env: []string{"PATH=" + defaultPath}, Stderr: &stderr}
	cmd.SysProcAttr = sysProcAttr(ns)
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return Report{}, fmt.Errorf("%w: %s", err, msg)
		}
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal(out, &r); err != nil {
		return Report{}, fmt.Errorf("failed to read the sandbox probe's report %q: %w", out, err)
	}
	return r, nil
}

// init turns a re-executed runtime binary into the launcher: it sets up the
// sandbox and replaces itself with the program (or, probing, reports). It
// must run before anything else of the process starts goroutines that
// could fork, so it lives in init.
func init() {
	if len(os.Args) < 2 || os.Args[0] != argv0 {
		return
	}
	// Landlock and prctl apply to the calling thread; the exec happens on
	// the same one.
	runtime.LockOSThread()
	err := launch(os.Args[1], os.Args[2:])
	fmt.Fprintf(os.Stderr, "picobot sandbox: %v\n", err)
	os.Exit(126)
}

// launch sets the sandbox up and execs argv; it returns only on failure.
func launch(specArg string, argv []string) error {
	var cs childSpec
	if err := json.Unmarshal([]byte(specArg), &cs); err != nil {
		return fmt.Errorf("failed to read sandbox spec: %w", err)
	}
	if !cs.Probe && len(argv) == 0 {
		return errors.New("no program to run")
	}
	rep := Report{Errors: map[string]string{}}
	if cs.Namespaces {
		rep.Namespaces = true
		if mountOwn(cs.Spec, &rep) {
			// Landlock sees the bind mount as a place of its own.
			cs.ReadWrite = append(cs.ReadWrite, "/tmp")
		}
	}
	abi, err := restrict(cs.Spec)
	if err != nil {
		rep.Errors["landlock"] = err.Error()
		if !cs.Probe {
			// The kernel has Landlock but refused our rules: fail closed.
			return err
		}
	}
	rep.LandlockABI = abi
	why := netMissing(abi)
	if why == "" && err != nil {
		why = err.Error()
	}
	rep.Network = why == ""
	if why != "" {
		rep.Errors["network"] = why
	}
	dropCapabilities()
	if cs.Probe {
		return exitWith(json.NewEncoder(os.Stdout).Encode(rep))
	}
	// Set again: the launcher's own setup changed its credentials, which
	// may have cleared the one set at fork.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	syscall.CloseOnExec(statusFD) // the program never sees the status pipe
	if cs.Self {
		return syscall.Exec(self, argv, os.Environ())
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("failed to find %q: %w", argv[0], err)
	}
	if !cs.Namespaces {
		return syscall.Exec(path, argv, os.Environ())
	}
	return initProcess(path, argv)
}

// initProcess runs the program as PID 2 and stays PID 1 of the namespace,
// reaping what is orphaned there, as tini and bubblewrap do: the kernel
// ignores signals without a handler sent to a namespace's init, so the
// program itself must not be PID 1 (kill $$ and a Ctrl-C of cat would do
// nothing). When the program ends the launcher writes its wait status to
// the status pipe and exits, and the kernel kills whatever is left in the
// namespace (background jobs end with the command, as outside). Threads
// matter here: the fork happens on this locked thread, whose Landlock
// domain, no_new_privs and capability sets the program inherits.
func initProcess(path string, argv []string) error {
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		return fmt.Errorf("failed to start %q: %w", argv[0], err)
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("failed to wait for %q: %w", argv[0], err)
		}
		if got != pid {
			continue // an orphan reaped
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(ws))
		_, _ = syscall.Write(statusFD, b[:])
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		os.Exit(code)
	}
}

func exitWith(err error) error {
	if err != nil {
		return err
	}
	os.Exit(0)
	return nil
}

// mountOwn gives the sandbox its own /proc (so the runtime's processes are
// not there to read) and /tmp (the workspace's temporary folder). Mounts
// stay inside the new mount namespace. A workspace under /tmp (tests) keeps
// the shared /tmp, which Landlock then keeps it out of. It reports whether
// /tmp is the workspace's.
func mountOwn(s Spec, rep *Report) (privateTmp bool) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		rep.Errors["namespaces"] = fmt.Sprintf("failed to make mounts private: %v", err)
		return false
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		rep.Errors["private /proc"] = err.Error()
	} else {
		rep.PrivateProc = true
	}
	if s.Workspace == "" || within(s.Workspace, "/tmp") {
		return false
	}
	return unix.Mount(TmpDir(s.Workspace), "/tmp", "", unix.MS_BIND|unix.MS_REC, "") == nil
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// systemDirs are read (and executed) by programs; nothing in them is the
// runtime's or a session's.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix",
	"/snap", "/run/systemd/resolve", "/sys/devices/system/cpu", "/proc"}

// devices programs open for themselves; ioctl on them is allowed (terminals).
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"}

// restrict applies the Landlock ruleset to this thread (inherited by the
// program): it returns the ABI used, 0 when the kernel has no Landlock.
// From ABI 4 the ruleset holds the network layer too (network_linux.go),
// with the socket filter beside it; either refused fails the whole.
func restrict(s Spec) (int, error) {
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("the kernel has no Landlock: %w", err)
	}
	if abi <= 0 {
		return 0, errors.New("the kernel has no Landlock")
	}
	rules := []landlock.Rule{
		landlock.RODirs(append(systemDirs, pathDirs(s.Env)...)...).IgnoreIfMissing(),
		landlock.RWFiles(devices...).WithIoctlDev().IgnoreIfMissing(),
		landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing(),
	}
	if s.Workspace != "" {
		rules = append(rules, landlock.RWDirs(s.Workspace).WithRefer())
	}
	for _, p := range s.ReadOnly {
		rules = append(rules, pathRule(p, false))
	}
	for _, p := range s.ReadWrite {
		rules = append(rules, pathRule(p, true))
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS, Scoped: landlock.V11.Scoped}
	network := netMissing(abi) == ""
	if network {
		cfg.HandledAccessNet = netHandled
		rules = append(rules, netRules(s)...)
	}
	cfg = cfg.BestEffort()
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return abi, fmt.Errorf("failed to build the Landlock ruleset: %w", err)
	}
	if fd < 0 {
		return 0, errors.New("the kernel has no Landlock")
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return abi, fmt.Errorf("failed to set no_new_privs: %w", err)
	}
	if err := llsyscall.LandlockRestrictSelf(fd, flags); err != nil {
		return abi, fmt.Errorf("failed to enforce the Landlock ruleset: %w", err)
	}
	if network {
		if err := filterSockets(); err != nil {
			return abi, err
		}
	}
	return abi, nil
}

// pathRule allows one opted-in path, a folder or a file.
func pathRule(p string, write bool) landlock.Rule {
	fi, err := os.Stat(p)
	dir := err != nil || fi.IsDir()
	switch {
	case dir && write:
		return landlock.RWDirs(p).WithRefer().IgnoreIfMissing()
	case dir:
		return landlock.RODirs(p).IgnoreIfMissing()
	case write:
		return landlock.RWFiles(p).IgnoreIfMissing()
	}
	return landlock.ROFiles(p).IgnoreIfMissing()
}

// pathDirs are the absolute folders of the program's PATH beyond the system
// ones (a toolchain under /usr/local/go, ~/go/bin): read-only, so what the
// user installed runs. The home folder itself and / are never taken whole,
// and a folder this user cannot read (the runtime's PATH seen from the
// sandbox container's user) is left out: Landlock cannot add a rule for it,
// and its programs could not use it either.
func pathDirs(env []string) []string {
	home, _ := os.UserHomeDir()
	var out []string
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "PATH=")
		if !ok {
			continue
		}
		for _, d := range filepath.SplitList(v) {
			d = filepath.Clean(d)
			if filepath.IsAbs(d) && d != "/" && d != home && unix.Access(d, unix.R_OK|unix.X_OK) == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// Securebits (linux/securebits.h): uid 0 gains no capabilities at exec.
const (
	secbitNoRoot       = 1 << 0
	secbitNoRootLocked = 1 << 1
)

// dropCapabilities empties the bounding and ambient sets and stops exec
// from granting uid 0 anything, so the program holds no capability even in
// its own user namespace (it cannot mount, unmount or change namespaces).
// Without the privilege to do so (an unprivileged user without namespaces)
// there is nothing to drop.
func dropCapabilities() {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_SECUREBITS, secbitNoRoot|secbitNoRootLocked, 0, 0, 0)
}
