// Package execserver runs the programs of the shell tools (bash, exec and
// process, pty) in the sandbox container of a cluster-mode session pod: the
// runtime container, which holds the model keys and the store, bus and API
// credentials, asks a small server in the sandbox container over a Unix
// socket in a shared emptyDir to start each program; the program then runs
// as another user, in another container, with none of those credentials.
//
// The protocol is written here by hand, because no RPC library in reach
// carries file descriptors: the runtime hands the program's stdin, stdout
// and stderr (pipes it made) to the server with SCM_RIGHTS, and the server
// hands back the master of a pseudo-terminal it opened. The bytes of a
// program's output then flow through the kernel from the program to the
// runtime, with no copy through the server and no framing of ours (a
// gRPC or JSON stream would add both, and a copy per chunk). What remains is
// a handful of small JSON messages, one per SOCK_SEQPACKET packet, so each
// message is read whole with the descriptors that came with it:
//
//	runtime -> server  start   {workspace, readOnly, readWrite, env, argv, tty?}  + stdin, stdout, stderr (not for a tty)
//	server  -> runtime started {pid}                                              + the terminal's master (tty)
//	                   | error {error}
//	runtime -> server  signal  {signal}                                           (any number of times)
//	server  -> runtime exited  {status}                                           (the wait status; then the server closes)
//
// One connection is one program: when the runtime closes it (or dies), the
// server kills the program's process group; when the program ends, the
// server kills what is left of its group (background jobs end with the
// command, as in the runtime's own launcher) and reports the status.
package execserver

import (
	"encoding/json"
	"fmt"
	"net"
	"syscall"
)

// SocketEnv names the exec server's socket in the runtime container's
// environment: with it set the shell tools start programs through the
// server, without it through the runtime's own sandbox launcher.
const SocketEnv = "PICOBOT_SANDBOX_SOCKET"

// maxPacket bounds one message: a start request holds the command and its
// environment. A longer script belongs in a file of the workspace.
const maxPacket = 128 << 10

// Request is what one program needs: where it runs, what it may reach and
// its whole environment (built by the runtime from the sandbox's allowlist).
type Request struct {
	Workspace string   `json:"workspace"`
	ReadOnly  []string `json:"readOnly,omitempty"`
	ReadWrite []string `json:"readWrite,omitempty"`
	Env       []string `json:"env"`
	Argv      []string `json:"argv"`
	// TTY asks for a pseudo-terminal of this size instead of the passed
	// descriptors.
	TTY *WinSize `json:"tty,omitempty"`
}

// WinSize is a terminal's size.
type WinSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// message is every packet after the request, both ways.
type message struct {
	Type   string `json:"type"` // started, error, exited, signal
	Pid    int    `json:"pid,omitempty"`
	Error  string `json:"error,omitempty"`
	Status uint32 `json:"status,omitempty"`
	Signal int    `json:"signal,omitempty"`
}

const (
	typeStarted = "started"
	typeError   = "error"
	typeExited  = "exited"
	typeSignal  = "signal"
)

// send writes v as one packet, with fds attached.
func send(c *net.UnixConn, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode exec server message: %w", err)
	}
	if len(b) > maxPacket {
		return fmt.Errorf("failed to send exec server message: it is %d bytes, the exec server takes at most %d "+
			"(write a long script to a file in the workspace and run the file)", len(b), maxPacket)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("failed to send exec server message: %w", err)
	}
	return nil
}

// receive reads one packet into v and returns the descriptors that came
// with it; the caller owns (and must close) them.
func receive(c *net.UnixConn, v any) ([]int, error) {
	buf := make([]byte, maxPacket+1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	switch {
	case ferr != nil:
		closeAll(fds)
		return nil, ferr
	case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
		closeAll(fds)
		return nil, fmt.Errorf("failed to read exec server message: longer than %d bytes or too many descriptors", maxPacket)
	case n == 0:
		closeAll(fds)
		return nil, net.ErrClosed
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("failed to decode exec server message: %w", err)
	}
	return fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("failed to parse passed descriptors: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("failed to parse passed descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = syscall.Close(fd)
	}
}
