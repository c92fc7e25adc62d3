//go:build !linux

package execserver

import (
	"context"
	"errors"
	"log/slog"

	"github.com/picobot/picobot/runtime/tool"
)

// Config configures a Server.
type Config struct {
	Socket    string
	Workspace string
	AllowUIDs []int
	Tools     func(readOnly, readWrite []string) []tool.Tool
	Log       *slog.Logger
}

// Server needs Linux (SO_PEERCRED, Landlock, child subreapers).
type Server struct{}

// New says the exec server needs Linux.
func New(Config) (*Server, error) { return nil, errors.New("the exec server needs Linux") }

// Serve says the exec server needs Linux.
func (*Server) Serve(context.Context) error { return errors.New("the exec server needs Linux") }
