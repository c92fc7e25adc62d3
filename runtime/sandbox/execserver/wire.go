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
//	runtime -> server  start   {workspace, readOnly, readWrite, allowedPorts, env, argv, tty?}  + stdin, stdout, stderr (not for a tty)
//	server  -> runtime started {pid}                                              + the terminal's master (tty)
//	                   | error {error}
//	runtime -> server  signal  {signal}                                           (any number of times)
//	server  -> runtime exited  {status}                                           (the wait status; then the server closes)
//
// A file tool call (file_read, file_write, apply_patch, ...) runs in the
// sandbox container too, so that what it may open is decided by the kernel
// for the sandbox's user, not by the runtime's path checks:
//
//	runtime -> server  start   {workspace, readOnly, readWrite, tool: {name, args, sessionId, agent}}
//	server  -> runtime result  {result: {content, isError}}
//	                   | error {error, argument?}
//
// A tool's arguments and result may be larger than a packet (a file to
// write, a page of a file read): such a message travels in a memfd passed
// with a packet that holds only largeMarker.
//
// One connection is one program: when the runtime closes it (or dies), the
// server kills the program's process group; when the program ends, the
// server kills what is left of its group (background jobs end with the
// command, as in the runtime's own launcher) and reports the status.
//
// A warm sandbox (embedded mode, package warm) has no socket path: the
// runtime holds one end of a socketpair whose other end is the server's
// (ServeControl), and a connection is a new socketpair, one end of which
// travels over the control socket:
//
//	runtime -> server  connect {}                                             + the connection's far end
//
// after which the connection speaks the protocol above.
package execserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
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
	// AllowedPorts are the TCP ports the program may connect to besides
	// the sandbox's defaults (sandbox.Spec.AllowedPorts).
	AllowedPorts []uint16 `json:"allowedPorts,omitempty"`
	Env          []string `json:"env"`
	Argv         []string `json:"argv"`
	// TTY asks for a pseudo-terminal of this size instead of the passed
	// descriptors.
	TTY *WinSize `json:"tty,omitempty"`
	// Tool asks the server to run a file tool instead of a program (Env,
	// Argv and TTY are then unused).
	Tool *ToolCall `json:"tool,omitempty"`
}

// ToolCall is one call of a tool the server runs itself (Config.Tools).
type ToolCall struct {
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args"`
	SessionID string          `json:"sessionId,omitempty"`
	Agent     string          `json:"agent,omitempty"`
}

// ToolResult is what the tool returned to the model.
type ToolResult struct {
	Content string `json:"content"`
	IsError bool   `json:"isError,omitempty"`
	// Artifacts are the files the tool produced (an image file_read
	// read, for the model to see).
	Artifacts []ToolArtifact `json:"artifacts,omitempty"`
}

// ToolArtifact is a file a tool produced (tool.Artifact on the wire).
type ToolArtifact struct {
	Name          string `json:"name"`
	MediaType     string `json:"mediaType"`
	Data          []byte `json:"data"`
	PresentToUser bool   `json:"presentToUser,omitempty"`
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
	// Result and Argument answer a tool call: its result, or (with Error)
	// that the arguments did not fit the tool.
	Result   *ToolResult `json:"result,omitempty"`
	Argument bool        `json:"argument,omitempty"`
}

const (
	typeConnect = "connect"
	typeStarted = "started"
	typeError   = "error"
	typeExited  = "exited"
	typeSignal  = "signal"
	typeResult  = "result"
)

// largeMarker is the whole packet of a message carried in a memfd (the
// last descriptor passed with it); a JSON message never reads so.
const largeMarker = "@memfd"

// maxLarge bounds a message carried in a memfd: a file the model writes or
// a result it reads is far smaller.
const maxLarge = 64 << 20

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

// sendLarge is send for a message that may exceed a packet (a tool call or
// its result): a longer one is written to a memfd passed with largeMarker.
func sendLarge(c *net.UnixConn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("failed to encode exec server message: %w", err)
	}
	return sendLargeRaw(c, b)
}

// sendLargeRaw is sendLarge of a message already encoded.
func sendLargeRaw(c *net.UnixConn, b []byte) error {
	if len(b) <= maxPacket {
		if _, _, err := c.WriteMsgUnix(b, nil, nil); err != nil {
			return fmt.Errorf("failed to send exec server message: %w", err)
		}
		return nil
	}
	if len(b) > maxLarge {
		return fmt.Errorf("failed to send exec server message: it is %d bytes, more than %d", len(b), maxLarge)
	}
	f, err := anonymousFile()
	if err != nil {
		return fmt.Errorf("failed to create a memfd for a large exec server message: %w", err)
	}
	defer func() { _ = f.Close() }()
	fd := int(f.Fd())
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("failed to write a large exec server message: %w", err)
	}
	if _, _, err := c.WriteMsgUnix([]byte(largeMarker), syscall.UnixRights(fd), nil); err != nil {
		return fmt.Errorf("failed to send exec server message: %w", err)
	}
	return nil
}

// readLarge reads the message a memfd carries (from its start: the sender's
// offset is shared with the descriptor) and closes it.
func readLarge(fd int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "picobot-message")
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxLarge+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read a large exec server message: %w", err)
	}
	if len(b) > maxLarge {
		return nil, fmt.Errorf("failed to read exec server message: longer than %d bytes", maxLarge)
	}
	return b, nil
}

// receive reads one packet into v and returns the descriptors that came
// with it; the caller owns (and must close) them.
func receive(c *net.UnixConn, v any) ([]int, error) {
	body, fds, err := receiveRaw(c)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("failed to decode exec server message: %w", err)
	}
	return fds, nil
}

// receiveRaw is receive without decoding: the message as sent.
func receiveRaw(c *net.UnixConn) ([]byte, []int, error) {
	buf := make([]byte, maxPacket+1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	switch {
	case ferr != nil:
		closeAll(fds)
		return nil, nil, ferr
	case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
		closeAll(fds)
		return nil, nil, fmt.Errorf("failed to read exec server message: longer than %d bytes or too many descriptors", maxPacket)
	case n == 0:
		closeAll(fds)
		return nil, nil, net.ErrClosed
	}
	body := buf[:n]
	if string(body) == largeMarker && len(fds) > 0 {
		last := fds[len(fds)-1]
		fds = fds[:len(fds)-1]
		if body, err = readLarge(last); err != nil {
			closeAll(fds)
			return nil, nil, err
		}
	}
	return body, fds, nil
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
