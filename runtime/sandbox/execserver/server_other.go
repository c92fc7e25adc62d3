//go:build !linux

package execserver

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"

	"github.com/picobot/picobot/runtime/tool"
)

// Config configures a Server.
type Config struct {
	Socket    string
	Workspace string
	AllowUIDs []int
	Tools     func(readOnly, readWrite []string) []tool.Tool
	// CreateWorkspaces: see the Linux Config.
	CreateWorkspaces bool
	Log              *slog.Logger
}

// Server needs Linux (SO_PEERCRED, Landlock, child subreapers).
type Server struct{}

// New says the exec server needs Linux.
func New(Config) (*Server, error) { return nil, errors.New("the exec server needs Linux") }

// Serve says the exec server needs Linux.
func (*Server) Serve(context.Context) error { return errors.New("the exec server needs Linux") }

// ServeTLS says the exec server needs Linux.
func (*Server) ServeTLS(context.Context, net.Listener, string, *tls.Config) error {
	return errors.New("the exec server needs Linux")
}

// Relay needs Linux (descriptors passed over a Unix socket).
type Relay struct {
	Socket string
	Client *Client
	Log    *slog.Logger
}

// Listen says the relay needs Linux.
func (*Relay) Listen() (*net.UnixListener, error) {
	return nil, errors.New("the exec relay needs Linux")
}

// Serve says the relay needs Linux.
func (*Relay) Serve(context.Context, *net.UnixListener) error {
	return errors.New("the exec relay needs Linux")
}
