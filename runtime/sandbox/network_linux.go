//go:build linux

package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The network layer. A program may open TCP connections only to the ports
// of connectPorts (DNS, web, and what the Agent opts in to): not to
// PostgreSQL on 5432, Redis on 6379, an S3 server on 8333 or 9000, the
// gateway or `picobot serve` on 8080, a browser's DevTools port, or any
// other service of the runtime's. In cluster mode the sandbox container
// shares the pod's network namespace with the runtime container, so a
// NetworkPolicy (which sees pods, not containers) cannot keep the one from
// what the other must reach; in embedded mode there is no policy at all.
// The kernel can: Landlock (ABI 4, Linux 6.7+) refuses connect(2) on a TCP
// port the domain was not given, with EACCES, whatever the program does.
//
// What it cannot do:
//   - It filters by port, not by address: a program given 443 reaches every
//     host on 443, an S3 endpoint on 443 included (the sandbox holds no
//     credential for it; the store's and bus's own credentials are what
//     keeps their data), and a port the Agent opts in to is open on every
//     address, loopback included.
//   - UDP is not covered (Landlock's UDP rules need ABI 10, and DNS needs
//     UDP anyway); no store, bus or blob server here listens on UDP.
//   - Only plain TCP is: Landlock leaves Multipath TCP and SMC sockets alone,
//     and both fall back to plain TCP against a server that does not speak
//     them, so they would reach any port. A seccomp filter (socketFilter)
//     refuses to create them, and refuses io_uring, whose socket and connect
//     operations seccomp never sees.
//   - Binding and listening stay free: a program may serve on any port (a
//     development server), and reaches it only on a port it is allowed to
//     connect to. Nothing of the runtime's can be taken over that way: a
//     port in use cannot be bound again (the runtime's listeners, Go's, do
//     not set SO_REUSEPORT).
//
// Per-address separation (the internet yes, the pod's services no, on the
// same port) needs the sandbox in a pod of its own, behind a NetworkPolicy
// the CNI enforces.

// netABI is the first Landlock ABI with TCP rules.
const netABI = 4

// netRules allow connecting to the default ports and the spec's own.
func netRules(s Spec) []landlock.Rule {
	var rules []landlock.Rule
	for _, p := range s.connectPorts() {
		rules = append(rules, landlock.ConnectTCP(p))
	}
	return rules
}

// netHandled is what the network layer restricts: TCP connects only.
const netHandled = landlock.AccessNetSet(llsyscall.AccessNetConnectTCP)

// netMissing says why a kernel with Landlock ABI abi gives no network
// layer on this machine, "" when it does.
func netMissing(abi int) string {
	switch _, err := filterArches(); {
	case abi <= 0:
		return "the kernel has no Landlock"
	case abi < netABI:
		return fmt.Sprintf("the kernel's Landlock ABI %d has no network rules (ABI %d, Linux 6.7+)", abi, netABI)
	case err != nil:
		return err.Error()
	}
	return ""
}

// Classic BPF and seccomp constants (linux/filter.h, linux/seccomp.h).
const (
	bpfLdWAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJgeK    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfRetK    = unix.BPF_RET | unix.BPF_K
	retAllow   = unix.SECCOMP_RET_ALLOW
	retErrno   = unix.SECCOMP_RET_ERRNO
	offNr      = 0  // seccomp_data.nr
	offArch    = 4  // seccomp_data.arch
	offArgLow0 = 16 // the low 32 bits of args[0] (little-endian)
	offArgLow2 = 32 // of args[2]
	x32Bit     = 0x40000000

	ipprotoSMC = 256 // IPPROTO_SMC (Linux 6.11+)
	afSMC      = 43  // AF_SMC
)

// filterArch is what the socket filter checks for one system call ABI a
// program of this machine may use.
type filterArch struct {
	audit  uint32
	socket uint32 // socket(2)
	// refuse are refused outright with ENOSYS: io_uring, and i386's
	// socketcall multiplexer, whose arguments lie in memory a filter cannot
	// read.
	refuse []uint32
	// x32 refuses the x32 ABI's calls (x86-64 only).
	x32 bool
}

// ioUring are io_uring_setup, io_uring_enter and io_uring_register, the same
// numbers on every architecture.
var ioUring = []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER}

// filterArches are the ABIs of this GOARCH: native and 32-bit compat.
func filterArches() ([]filterArch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return []filterArch{
			{audit: unix.AUDIT_ARCH_X86_64, socket: 41, refuse: ioUring, x32: true},
			{audit: unix.AUDIT_ARCH_I386, socket: 359, refuse: append([]uint32{102}, ioUring...)},
		}, nil
	case "arm64":
		return []filterArch{
			{audit: unix.AUDIT_ARCH_AARCH64, socket: 198, refuse: ioUring},
			{audit: unix.AUDIT_ARCH_ARM, socket: 281, refuse: ioUring},
		}, nil
	}
	return nil, fmt.Errorf("no socket filter for %s", runtime.GOARCH)
}

// bpfProg assembles a classic BPF program with symbolic jump targets.
//
// Written here rather than taken from a library: libseccomp's Go binding
// needs cgo and the C library in the image, and the pure-Go
// github.com/elastic/go-seccomp-bpf assembles one architecture per filter,
// sending every call of another ABI (i386 on x86-64, arm on arm64) to a
// single action, so it could either let the compat ABI's sockets through
// unchecked or refuse every compat call. This filter checks both ABIs,
// each with its own numbers, in about sixty instructions.
type bpfProg struct {
	ins    []unix.SockFilter
	labels map[string]int
	jumps  []bpfJump
}

type bpfJump struct {
	at     int
	jt, jf string
}

func (p *bpfProg) load(off uint32) { p.ins = append(p.ins, unix.SockFilter{Code: bpfLdWAbs, K: off}) }
func (p *bpfProg) ret(v uint32)    { p.ins = append(p.ins, unix.SockFilter{Code: bpfRetK, K: v}) }
func (p *bpfProg) label(name string) {
	p.labels[name] = len(p.ins)
}

// jump compares the accumulator with k and goes to jt or jf ("" is the
// next instruction).
func (p *bpfProg) jump(code uint16, k uint32, jt, jf string) {
	p.jumps = append(p.jumps, bpfJump{at: len(p.ins), jt: jt, jf: jf})
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k})
}

func (p *bpfProg) resolve() ([]unix.SockFilter, error) {
	for _, j := range p.jumps {
		off := func(name string) (uint8, error) {
			if name == "" {
				return 0, nil
			}
			to, ok := p.labels[name]
			if !ok || to <= j.at || to-j.at-1 > 255 {
				return 0, fmt.Errorf("bad jump to %q", name)
			}
			return uint8(to - j.at - 1), nil
		}
		var err error
		if p.ins[j.at].Jt, err = off(j.jt); err != nil {
			return nil, err
		}
		if p.ins[j.at].Jf, err = off(j.jf); err != nil {
			return nil, err
		}
	}
	return p.ins, nil
}

// socketFilter builds the seccomp filter that closes what Landlock's TCP
// rules do not see: sockets of the TCP-compatible protocols (Multipath TCP,
// SMC) fail as on a kernel without them (EPROTONOSUPPORT, EAFNOSUPPORT;
// Go, curl and Python then use plain TCP), io_uring as on a kernel without
// it (ENOSYS; libuv and liburing fall back to plain system calls).
func socketFilter() ([]unix.SockFilter, error) {
	arches, err := filterArches()
	if err != nil {
		return nil, err
	}
	p := &bpfProg{labels: map[string]int{}}
	p.load(offArch)
	for i, a := range arches {
		next, sock := fmt.Sprintf("arch%d", i+1), fmt.Sprintf("socket%d", i)
		p.jump(bpfJeqK, a.audit, "", next)
		p.load(offNr)
		if a.x32 {
			p.jump(bpfJgeK, x32Bit, "nosys", "")
		}
		for _, nr := range a.refuse {
			p.jump(bpfJeqK, nr, "nosys", "")
		}
		p.jump(bpfJeqK, a.socket, sock, "allow")
		p.label(sock)
		p.load(offArgLow0)
		p.jump(bpfJeqK, afSMC, "noaf", "")
		p.load(offArgLow2)
		p.jump(bpfJeqK, unix.IPPROTO_MPTCP, "noproto", "")
		p.jump(bpfJeqK, ipprotoSMC, "noproto", "allow")
		p.label(next)
	}
	p.label("allow")
	p.ret(retAllow)
	p.label("nosys")
	p.ret(retErrno | uint32(unix.ENOSYS))
	p.label("noaf")
	p.ret(retErrno | uint32(unix.EAFNOSUPPORT))
	p.label("noproto")
	p.ret(retErrno | uint32(unix.EPROTONOSUPPORT))
	return p.resolve()
}

// filterSockets installs socketFilter on this thread (inherited by what it
// forks and execs); no_new_privs must be set.
func filterSockets() error {
	ins, err := socketFilter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	// seccomp(2) without SECCOMP_FILTER_FLAG_TSYNC: this thread only, like
	// Landlock's restrict_self.
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("failed to install the socket filter: %w", errno)
	}
	runtime.KeepAlive(ins)
	return nil
}
