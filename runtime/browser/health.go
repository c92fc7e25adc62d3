package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/proto"
)

// CheckExecutable reports whether bin is an executable file.
func CheckExecutable(bin string) error {
	if bin == "" {
		bin = DefaultBin
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return &MissingError{Bin: bin, Err: fmt.Errorf("no browser executable at %s", bin)}
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return &MissingError{Bin: bin, Err: fmt.Errorf("%s is not an executable file", bin)}
	}
	return nil
}

// CheckLaunch starts bin headless in a throw-away profile, asks it for its
// version over DevTools and stops it: the real test that the browser works
// here (shared libraries, sandbox, fonts). It returns the version.
func CheckLaunch(ctx context.Context, bin string) (string, error) {
	if err := CheckExecutable(bin); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "picobot-browser-check-")
	if err != nil {
		return "", fmt.Errorf("failed to create a temporary profile folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	proc, err := Launch(ctx, LaunchSpec{Bin: bin, UserDataDir: dir})
	if err != nil {
		return "", err
	}
	defer proc.Stop(5 * time.Second)
	ws := &cdp.WebSocket{}
	if err := ws.Connect(ctx, proc.WebSocketURL, nil); err != nil {
		return "", &MissingError{Bin: bin, Err: fmt.Errorf("the browser started but its DevTools endpoint did not answer: %w", err)}
	}
	defer func() { _ = ws.Close() }()
	c := cdp.New().Start(ws)
	raw, err := c.Call(ctx, "", proto.BrowserGetVersion{}.ProtoReq(), nil)
	if err != nil {
		return "", &MissingError{Bin: bin, Err: fmt.Errorf("the browser started but did not answer over DevTools: %w", err)}
	}
	var v proto.BrowserGetVersionResult
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("failed to read the browser version: %w", err)
	}
	return v.Product, nil
}
